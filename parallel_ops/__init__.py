"""parallel_ops: filled by later issues (see ../shared/DESIGN.md)."""
