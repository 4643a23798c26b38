"""The explorer's panes, each a small widget that is given data and posts what the user did."""
