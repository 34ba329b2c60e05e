"""The model catalog: what operators ask the cluster to serve."""

from llmgw.catalog.model import GpuNeed, Model, ModelSource, Profile, check_model_name

__all__ = ["GpuNeed", "Model", "ModelSource", "Profile", "check_model_name"]
