"""The revisions, one file each; released files are never edited (add a new revision)."""
