"""The study report's reference for You et al. 2020 (``analysis.reference = 'lamb_lars.proj.you2020.reference'``,
the default of lamb_lars/configs/studies/common.py): what the generic report puts beside a study's measurements
(lamb_lars/study/report/reference.py reads these names).

* ``TABLE2``, ``POINTS``: the paper's baselines, regimes and huge-batch results (paper.py);
* ``table3_section``, ``table3_replicates_section``: the Table 3 sections of a study with ``role='table3'`` trials
  (table3.py).
"""

from lamb_lars.proj.you2020.paper import POINTS, TABLE2, TABLE3  # noqa: F401  (read by name)
from lamb_lars.proj.you2020.table3 import table3_replicates_section, table3_section  # noqa: F401
