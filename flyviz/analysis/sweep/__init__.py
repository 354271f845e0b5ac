"""The lesion map: which groups of neurons a text depends on, each group lesioned in turn.

A sweep lesions every group of neurons of a model in turn (every superclass,
every cell type, each side, or named queries) and measures, teacher-forced
over a text, how much worse the model predicts it. ``flyviz sweep`` is the
command; :class:`LesionMap` reads its result (for the app and for scripts).

Groups
------
``superclass``, ``type``, ``side``
    One group per label of the model's anatomy (neurons without a label form
    the group ``(unlabelled)``), in the order of the labels' first neuron.
``FILE``
    One group per line ``NAME: QUERY`` (the query language of
    :mod:`flyviz.model.selection`; blank lines and lines starting with ``#``
    are skipped). A query that does not parse or selects nothing is an error
    naming its line. Groups may overlap.

Every group has a query that selects exactly its neurons (for a cell type
whose name holds glob characters they are escaped: ``type:"A[*]"``), which
``flyviz compare`` and :class:`~flyviz.model.interventions.Silence` take as is.

Lesions (``--mode``)
--------------------
``silence``
    the group's state is 0 after every step: ``Silence(group)``;
``cut-out``
    every synapse from the group removed: ``Cut(group, "all")``;
``cut-in``
    every synapse onto the group removed: ``Cut("all", group)``.

What is measured
----------------
The text is read as the atlas reads a corpus (:mod:`flyviz.analysis.corpus`):
each document is cut into windows of at most ``context - 1`` tokens, each fed
from the zero state as ``BOS t_1 .. t_{L-1}``. Position ``p`` (0 is the BOS)
has read ``t_0 .. t_p`` and predicts ``t_{p+1}``; the positions ``0 .. L-2``
of every window count (every token of the text but the BOS is predicted once;
the last token of a window predicts nothing). At each counted position, with
``p`` the untouched model's next-token distribution and ``q`` the lesioned
one's (softmax of the logits in float64)::

    CE_u = -ln max(p[t], 1e-300)        CE_g = -ln max(q[t], 1e-300)      t = t_{p+1}
    KL   = sum_v p_v (ln p_v - ln max(q_v, 1e-300))                       (nats)
    agree = argmax p == argmax q

and per group, over all ``N`` counted positions: ``delta_ce`` = mean of
``CE_g - CE_u`` (nats/token), ``kl`` = mean KL, ``top1_agreement`` = mean of
``agree``, ``cross_entropy`` = mean ``CE_g``; the untouched model's mean
``CE_u`` is the result's ``baseline_cross_entropy``. These are exactly the
numbers :func:`flyviz.record.compare.forced_on_text` (``flyviz compare``'s
runner) gives for one window and one intervention, averaged over the text
(``tests/test_analysis_sweep.py`` checks them to 1e-6).

How it runs
-----------
One pass of the batched engine (:class:`~flyviz.model.batch.BatchEngine`)
carries ``B - 1`` groups (``--batch B``, default 64: 63 groups) and one
untouched column, all reading the same tokens; each group's lesion acts on
its own column through :class:`~flyviz.model.batch.LesionHooks`. The work is
*tasks* of one block of groups over one chunk of the text (whole windows):
blocks x chunks, run on Dask by :func:`flyviz.analysis.cluster.run_tree`.
The text is cut into chunks of about ``--chunk-tokens`` tokens, or finer
(down to one window) when there are too few blocks to make
:attr:`SweepSettings.min_tasks` tasks. The plan depends only on the text,
the groups and the settings, never on the workers.

A task's partial holds, per (group, chunk), float64 sums of the measures
and integer counts. The merge is the union of two partials' entries, sorted
by (group, chunk): exact, and the same whatever the order, so 1 worker, 2
workers and a resumed run give the same bits. The final sums add each
group's chunks in chunk order.

Result file
-----------
CSV or Parquet, by the extension of ``--out``, one row per group sorted by
``delta_ce`` (largest first; ties in group order), with the columns of
:data:`COLUMNS`. The settings, the text, the untouched cross-entropy and the
model's identity (weight and graph digests, :mod:`flyviz.model.identity`)
are one JSON object: in a Parquet file the schema metadata key
``flyviz_sweep``; in a CSV file its first line, ``# flyviz-sweep {...}``
(read the table with ``pandas.read_csv(path, skiprows=1)``). One file
holds everything, so the identity cannot be separated from the numbers.

Modules
-------
:mod:`~flyviz.analysis.sweep.groups`
    How the groups are defined (labels, a groups file, their digest).
:mod:`~flyviz.analysis.sweep.tasks`
    The settings, the task list and one task's pass; the merge of partials.
:mod:`~flyviz.analysis.sweep.run`
    :func:`run_sweep` on Dask or in this process, ``--resume``, the result file.
:mod:`~flyviz.analysis.sweep.lesion_map`
    The rows and :class:`LesionMap`, the result file's reader.

Every public name is importable from :mod:`flyviz.analysis.sweep` itself.
"""


from __future__ import annotations

from flyviz.analysis.sweep.groups import (BY_LABELS, UNLABELLED, Group, check_by,
                                          file_groups, groups_digest, label_groups,
                                          label_query, sweep_groups)
from flyviz.analysis.sweep.lesion_map import (COLUMNS, CSV_PREFIX, FORMAT, FORMAT_VERSION,
                                              METRICS, PARQUET_KEY, GroupResult, LesionMap,
                                              SweepError, open_lesion_map, rows_digest)
from flyviz.analysis.sweep.run import SweepRun, format_table, run_sweep, write_result
from flyviz.analysis.sweep.tasks import (LOG_FLOOR, MODES, SweepSettings, SweepTask,
                                         finish, merge_partials, pass_partial, plan_chunks,
                                         plan_tasks, release_engines, sweep_task)
from flyviz.analysis.table_file import (CSV_SUFFIXES, PARQUET_SUFFIXES, check_output,
                                        result_format)

__all__ = ["BY_LABELS", "COLUMNS", "CSV_PREFIX", "CSV_SUFFIXES", "FORMAT", "FORMAT_VERSION",
           "Group", "GroupResult", "LOG_FLOOR", "LesionMap", "METRICS", "MODES", "PARQUET_KEY",
           "PARQUET_SUFFIXES", "SweepError", "SweepRun", "SweepSettings", "SweepTask",
           "UNLABELLED", "check_by", "check_output", "file_groups", "finish", "format_table",
           "groups_digest", "label_groups", "label_query", "merge_partials", "open_lesion_map",
           "pass_partial", "plan_chunks", "plan_tasks", "release_engines", "result_format",
           "rows_digest", "run_sweep", "sweep_groups", "sweep_task", "write_result"]
