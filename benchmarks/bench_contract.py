"""The contract's codecs side by side with fastavro on the hot-path event (no Kafka).

    python benchmarks/bench_contract.py [--lanes 8] [--number 20000]

Prints each codec's time per 8-lane `StepCompletedEvent` and the ratios that
matter: our Avro encoder vs fastavro's `schemaless_writer` (the engine inside
confluent-kafka's `AvroSerializer`), and our decoder (to typed events) vs
fastavro's reader (to dicts). Ratios from one run, measured side by side.
"""

from __future__ import annotations

import argparse
import sys

from rlmesh_stream.schemas import bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    times = bench.run(args.lanes, args.number)
    for name, us in times.items():
        print(f"{us:8.2f} us  {name}")
    enc = times["avro encode (fastavro.schemaless_writer, record dict given)"] / times[
        "avro encode (ours)"]
    dec = times["avro decode (fastavro.schemaless_reader, to dicts)"] / times[
        "avro decode (ours, to dataclasses)"]
    fast = times["avro decode (fastavro + conversion to dataclasses, no generated reader)"] / (
        times["avro decode (ours, to dataclasses)"])
    print(f"ratio: our Avro encoder is {enc:.1f}x faster than fastavro's writer")
    print(f"ratio: the generated Avro reader is {fast:.1f}x faster than fastavro's reader plus "
          "the conversion to dataclasses (what decoding costs without it)")
    print(f"ratio: our Avro decoder (to dataclasses) is {dec:.1f}x faster than fastavro's "
          "reader (to dicts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
