"""The RSS worker: ``python -m hnnsym.profiling '<json spec>'`` runs ``measure_rss_here`` on the spec
(written by ``hnnsym.profiling.memory.rss_subprocess``) and prints its result as one JSON line."""

import json
import sys

from hnnsym.profiling.memory import measure_rss_here

if __name__ == "__main__":
    print(json.dumps(measure_rss_here(json.loads(sys.argv[1]))))
