"""Data: the HDF5 file format (hdf5), making data (simulate), training windows (windows)."""
