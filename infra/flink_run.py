"""Run Flink SQL in PyFlink's own interpreter (`infra/flink.py`): DDL, then queries to JSON.

Invoked as `<pyflink venv>/bin/python flink_run.py SPEC.json`, never imported by the
project (PyFlink lives in a venv of its own). SPEC names the connector jars, the
statements to execute first (the generated `CREATE TABLE`s, views) and the queries;
each query's rows are written by Flink's filesystem sink as JSON lines under
`out_dir/<name>/`, all queries in one batch job. With `streaming` set, the job runs in
streaming mode (updating results) and executes SPEC's `inserts` (INSERT INTO a sink
that upserts, e.g. JDBC) instead of queries.
"""

import json
import sys


def main(spec_path: str) -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with open(spec_path) as fh:
        spec = json.load(fh)
    streaming = spec.get("streaming", False)
    settings = (EnvironmentSettings.in_streaming_mode() if streaming
                else EnvironmentSettings.in_batch_mode())
    env = TableEnvironment.create(settings)
    config = env.get_config()
    config.set("pipeline.jars", ";".join("file://" + jar for jar in spec["jars"]))
    config.set("parallelism.default", "1")
    for statement in spec["statements"]:
        env.execute_sql(statement)
    job = env.create_statement_set()
    for insert in spec.get("inserts", []):
        job.add_insert_sql(insert)
    for name, query in spec.get("queries", {}).items():
        job.add_insert_sql(
            f"CREATE TABLE `out_{name}` WITH ('connector' = 'filesystem', "
            f"'path' = '{spec['out_dir']}/{name}', 'format' = 'json') AS {query}")
    job.execute().wait()


if __name__ == "__main__":
    main(sys.argv[1])
