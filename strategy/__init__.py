"""strategy: filled by later issues (see ../shared/DESIGN.md)."""
