"""Whole-corpus analyses of a Fly LLM (no Qt): corpora, Dask plumbing, the neuron atlas,
the lesion map.

:mod:`flyviz.analysis.corpus`
    Reading and tokenizing corpora into windows and chunks.
:mod:`flyviz.analysis.cluster`
    Tasks over chunks on a Dask LocalCluster or cluster, partials merged in a
    fixed tree, progress, Ctrl+C and ``--resume``.
:mod:`flyviz.analysis.parts`
    The fixed merge tree and the finished nodes kept on disk for ``--resume``.
:mod:`flyviz.analysis.runs`
    What the lesion map, estimated lesions and causal trace set up alike: the
    workers' arguments, the in-process run, the shared metadata.
:mod:`flyviz.analysis.table_file`
    The result tables' file format (CSV or Parquet with JSON metadata): writer and reader.
:mod:`flyviz.analysis.atlas`
    The neuron atlas's reader (:class:`~flyviz.analysis.atlas.Atlas`); its
    statistics and their merge are :mod:`flyviz.analysis.atlas_stats`, the Dask
    build and the writing of the Zarr store :mod:`flyviz.analysis.atlas_build`.
:mod:`flyviz.analysis.sweep`
    The lesion map: every group of neurons lesioned in turn over a text
    (a package: groups, tasks, run, lesion_map), the result file and its reader.
:mod:`flyviz.analysis.causal`
    The causal trace: every group restored to a clean run's state at every
    position of a corrupted prompt, the result file and its reader.
:mod:`flyviz.analysis.heatmap`
    A causal trace's heatmap as PNG or SVG, without a window.
"""
