"""The fixture trees hold symlinks into themselves: pytest must not collect inside them."""

collect_ignore = ["fixtures"]
