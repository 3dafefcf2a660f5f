"""Observability: the PromQL, Grafana dashboards, alert rules and scrape conventions, from one source.

`python -m governor.observability generate` writes dashboards/, alerts/ and the Helm chart's generated copies;
`--check` fails when a committed file differs from what the source generates.
"""
