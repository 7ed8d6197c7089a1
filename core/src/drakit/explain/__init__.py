"""``drakit explain``: why a claim fits a node or does not, in terms a user can act on."""
