"""Prometheus text expositions read back: the web app's replica choice and the tooling's
servers both read /metrics, with prometheus_client's own parser."""

from prometheus_client.parser import text_string_to_metric_families


def metric_values(exposition: str) -> dict[str, float]:
    """Each sample's value by name, summed over its labels (prometheus_client reads the text)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values
