"""Live ipywidgets panels of the chapters, and training from a panel in the background."""
