"""Plotly figures: the course's style, and the builders of every chapter's figures."""
