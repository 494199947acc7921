"""Makes Transformers' common test mixins importable from its source distribution.

The sdist ships ``tests/test_modeling_common.py`` and ``tests/test_training_mixin.py`` but not
two modules the former imports: ``tests/exporters/test_export.py`` (torch.export checks,
which this project does not claim) and ``tests/generation/test_utils.py``. They are stood in
for here: the export mixin by an empty class, the generation mixin by this project's own
generation coverage (generation_coverage.py), which compares hpu tokens with CPU tokens.
The sdist's root is on ``sys.path`` (``python -m peer_suites`` runs pytest from there).
"""

from __future__ import annotations

import sys
import types

from generation_coverage import GenerationCoverageMixin


class ExportTesterMixin:
    """Stands in for the sdist's missing torch.export mixin: no export tests are claimed."""


def _stand_in(name: str, **attributes: object) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


_stand_in("tests.exporters")
_stand_in("tests.exporters.test_export", ExportTesterMixin=ExportTesterMixin)
_stand_in("tests.generation")
_stand_in("tests.generation.test_utils", GenerationTesterMixin=GenerationCoverageMixin)
