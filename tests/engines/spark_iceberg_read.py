"""Run by a Python with PySpark 4.0 (not by pytest): Spark reads the export's Iceberg tables
through Iceberg's JDBC catalog over the same SQLite file, and prints what it read as JSON.

Arguments: the catalog's SQLite file, the warehouse URI, NAMESPACE.NAME. The jars come
from Maven Central (spark.jars.packages, cached by Ivy under ~/.ivy2).
"""

import json
import sys

from pyspark.sql import SparkSession

PACKAGES = ("org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.0,"
            "org.xerial:sqlite-jdbc:3.46.1.3")


def main() -> None:
    db, warehouse, table = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[1]").appName("rlmesh-iceberg-read")
             .config("spark.jars.packages", PACKAGES)
             .config("spark.sql.catalog.rlmesh", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.rlmesh.type", "jdbc")
             .config("spark.sql.catalog.rlmesh.uri", f"jdbc:sqlite:{db}")
             .config("spark.sql.catalog.rlmesh.jdbc.schema-version", "V1")
             .config("spark.sql.catalog.rlmesh.warehouse", warehouse)
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    episodes = spark.sql("SELECT session_id, episode_record_id, steps "
                         f"FROM rlmesh.{table}_episodes").collect()
    steps = spark.sql(f"SELECT env_id, count(*) AS n FROM rlmesh.{table}_steps "
                      "GROUP BY env_id").collect()
    print(json.dumps({
        "episodes": sorted([r.session_id, r.episode_record_id, r.steps] for r in episodes),
        "steps": {r.env_id: r.n for r in steps}}))
    spark.stop()


if __name__ == "__main__":
    main()
