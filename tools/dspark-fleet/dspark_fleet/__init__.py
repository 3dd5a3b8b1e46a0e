"""dspark-fleet: reprovision, plan and check many DGX Spark serving groups of one inventory (ansible-runner)."""

__version__ = "0.1.0"
