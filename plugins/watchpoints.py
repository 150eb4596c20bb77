"""The watchpoints probe type (being written)."""
