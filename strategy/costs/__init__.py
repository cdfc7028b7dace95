"""The cost model: how long each task node of a TaskGraph takes on a device (docs/costs.md).

Measured costs (profiler.py, app_profile.py) are stored in profile files (profile.py);
the analytic model (analytic.py) times parts on devices one does not have from their work
(work.py) and is calibrated from measurements; CostModel (model.py) answers the simulator.
Copies and collectives are timed by the machine model, not here.
"""
from .analytic import Calibration, CalibrationError, analytic_time, calibrate, default_calibration
from .app_profile import app_graphs, load_app, profile_app, search_strategies
from .model import CostModel, CostWarning, Explanation
from .profile import Measurement, Profile, ProfileError, Work, device_kind, gpu_kind
from .profiler import ProfileWarning, measure_node, profile_graph, profile_nodes
from .work import node_bytes, node_flops, node_work

__all__ = ["Calibration", "CalibrationError", "analytic_time", "calibrate",
           "default_calibration", "app_graphs", "load_app", "profile_app", "search_strategies",
           "CostModel", "CostWarning", "Explanation", "Measurement", "Profile", "ProfileError",
           "Work", "device_kind", "gpu_kind", "ProfileWarning", "measure_node", "profile_graph",
           "profile_nodes", "node_bytes", "node_flops", "node_work"]
