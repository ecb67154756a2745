"""The one thing pyproject.toml cannot say yet without an experimental table: the compiled
batch update of the tool-status map (client/model/_prefixtree.c). It is optional: where no
C compiler is, the install still succeeds and client/model/vmap.py's Python, the update's
definition, runs instead (the authority logs that it does)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "deplog.client.model._prefixtree",
            sources=["client/model/_prefixtree.c"],
            optional=True,
        )
    ]
)
