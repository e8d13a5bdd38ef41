"""A queue's labelled history: the closed and triaged issues read with their final labels
(`sync`), and every labelled example, from GitHub or from a decision approved here
(`examples`)."""
