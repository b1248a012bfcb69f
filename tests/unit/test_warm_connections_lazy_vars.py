"""rigger watch's kept connections with a run's connection variables, which are rendered
when read (issue 20): a setting no connection reads whose template cannot render must not
break the reuse key. Real: WarmConnections, templating.RenderedOnRead, a real local
connection; nothing is mocked."""

from __future__ import annotations

from engine import templating
from engine.connection.warm import WarmConnections


def test_an_unrenderable_setting_no_connection_reads_does_not_break_reuse() -> None:
    values = {"ansible_connection": "local", "ansible_cluster_domain": "{{ only_on_dns_hosts }}"}
    host_vars = templating.RenderedOnRead(values, templating.Scope(values, {}))
    warm = WarmConnections()
    try:
        first = warm.get("gpu01", host_vars)
        assert warm.get("gpu01", templating.RenderedOnRead(values, templating.Scope(values, {}))) is first
    finally:
        warm.close_all()
