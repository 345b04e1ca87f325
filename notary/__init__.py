"""converge notary: a Convergence-style network-perspective notary."""

__version__ = "0.1.0"

__all__ = ["__version__"]
