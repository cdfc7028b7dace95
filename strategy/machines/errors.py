"""Typed errors of the machine models. Messages read "where: what (values). how to fix"."""


class MachineModelError(ValueError):
    """A machine model is inconsistent or is asked about a device or spec it does not have."""


class MachineFileError(MachineModelError):
    """A machine file cannot be read, or describes an invalid machine; names the file."""
