"""The CA verifier the service can use beside (or instead of) perspectives: chains verified
against a full or restricted (top-k) root store (docs/rootstore.md)."""
