"""The files of the series: the order file, one format-patch mail, the patch manifest."""
