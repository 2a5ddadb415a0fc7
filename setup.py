"""The one compiled module of the project, ``ingest.loader._cdecode`` (the Parquet loader's Avro column
decoder; everything else is in pyproject.toml). ``optional``: without a C compiler the install still
succeeds and the loader runs its Python decoder (ingest/loader/cdecode.py logs that once)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ingest.loader._cdecode", ["ingest/loader/_cdecode.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
                             optional=True)])
