"""Rendering: report.md, report.html and their figures (matplotlib, Agg backend) from the
statistics' tables."""
