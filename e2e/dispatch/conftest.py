"""The dispatcher's end-to-end tests share ``e2e/controller.py`` and the session fixtures
of ``e2e/conftest.py`` (``mcad``: a real ``mcad run`` with spoke-1 and spoke-2
registered; ``aw_namespace``)."""

from e2e.controller import (  # noqa: F401  (re-exported for the tests of this folder)
    AW,
    NAMESPACE,
    QST,
    SPOKE,
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    mcad_cli,
    wait_state,
)
