"""The one place this package reaches into specdec's fleet simulator and cost models.

Why one place: those modules are moving (``specdec.serving`` is being split into ``plan``,
``estimate`` and ``control``); every name this package uses from them is imported here, so the
move repoints one file.
"""

from ...serving.acceptance import AcceptanceDist
from ...serving.cost import StepCostModel, StepSample, packed_features
from ...serving.engine_calibration import Stream, acceptance_from_counters, cluster_steps, trace_samples
from ...serving.memory import dtype_bytes, kv_bytes_per_token
from ...serving.metrics import SLO, RequestRecord, summarize
from ...serving.policies import AlwaysOn, Off, Policy
from ...serving.simulator import ServerConfig, simulate
from ...serving.workload import SimRequest, WorkloadItem, make_requests, poisson_arrivals

__all__ = ["AcceptanceDist", "AlwaysOn", "Off", "Policy", "RequestRecord", "SLO", "ServerConfig", "SimRequest",
           "StepCostModel", "StepSample", "Stream", "WorkloadItem", "acceptance_from_counters", "cluster_steps",
           "dtype_bytes", "kv_bytes_per_token", "make_requests", "packed_features", "poisson_arrivals", "simulate",
           "summarize", "trace_samples"]
