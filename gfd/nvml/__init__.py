"""NVML access: its modules are the only code in gfd that imports pynvml.

:mod:`gfd.nvml.reader` is the entry point; the other modules are the parts of one read.

Nothing is imported here eagerly so that ``import gfd.nvml`` stays cheap.
"""
