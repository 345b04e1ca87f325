"""Trace replay: NetFlow traces to notary validation workloads, synthetic traces, a target
farm, an open-loop replayer and the study's reports.

Pure modules (no IO, time passed in): ``flows``, ``model``, ``reference``, ``pacer``, ``aggregate``,
``synth``. IO modules: ``ingest``, ``workload``, ``farm``, ``pki``, ``httpclient``,
``runner``, ``report``, ``rdns``, ``cli``; ``rootstore/`` (the restricted-root-store study,
``replay rootstore ...``, docs/rootstore.md). See docs/replay.md.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
