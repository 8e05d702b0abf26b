"""Cost model calibrated from real profiles: fitted coefficients, readers, fitting, CalibratedPerfModel."""
from reference_impl.calibration.memory import MemoryModel
from reference_impl.calibration.model import CalibratedPerfModel, Link

__all__ = ["CalibratedPerfModel", "Link", "MemoryModel"]
