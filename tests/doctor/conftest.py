"""The fixture trees are sysfs copies full of symlink cycles (``device`` links point back up):
pytest must never walk into them looking for tests."""

collect_ignore = ["fixtures", "data"]
