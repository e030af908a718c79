"""NVML access. :mod:`gfd.nvml.reader` is the only module in gfd that imports pynvml.

Nothing is imported here eagerly so that ``import gfd.nvml`` stays cheap.
"""
