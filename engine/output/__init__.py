"""Output: the only place that writes to the terminal."""
