"""Agent harness hooks, run as scripts (`winnow budget hook` prints the settings entry)."""
