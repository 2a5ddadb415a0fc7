"""The compiled modules of the project (everything else is in pyproject.toml): ``ingest.loader._cdecode``,
the Parquet loader's Avro column decoder, and ``ingest.records._crecords``, a v2 batch's records read as
columns. ``optional``: without a C compiler the install still succeeds and the Python code runs
(ingest/loader/cdecode.py logs that once)."""
from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(ext_modules=[Extension("ingest.loader._cdecode", ["ingest/loader/_cdecode.c"], extra_compile_args=FLAGS,
                             optional=True),
                   Extension("ingest.records._crecords", ["ingest/records/_crecords.c"], extra_compile_args=FLAGS,
                             optional=True)])
