"""Fluent builders for test objects: AppWrappers, quota trees (and clusters, elsewhere).

Modules are imported by name (``from tests.builders.appwrappers import make_appwrapper``)
so each builder can grow without touching the others.
"""
