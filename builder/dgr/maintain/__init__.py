"""Maintaining the series: `dgr check` (lint, style), edit and export, rebase-check, moving the pin."""
