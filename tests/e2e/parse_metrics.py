"""Parses a Prometheus text exposition from stdin with the official Python client's parser
and prints its families as JSON: {name: {"type": ..., "samples": [[name, labels, value]]}}.
Exits non-zero (with the parser's error) when the text is not valid exposition format.
Used by tests/integration/operability.rs."""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def main() -> int:
    text = sys.stdin.read()
    families = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name in families:
                raise ValueError(f"family {family.name} appears twice")
            families[family.name] = {
                "type": family.type,
                "samples": [
                    [s.name, s.labels, None if math.isnan(s.value) else s.value]
                    for s in family.samples
                ],
            }
    except Exception as err:  # the parser raises ValueError and friends
        print(f"invalid exposition: {err!r}", file=sys.stderr)
        return 1
    json.dump(families, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
