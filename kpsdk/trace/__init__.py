"""``kpsdk trace``: ftrace dynamic-event definitions (being written)."""
