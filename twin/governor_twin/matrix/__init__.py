"""The generalization matrix (issue 12): cap policies over profiles × SLO targets × workloads, on the twin."""
