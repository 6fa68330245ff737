# Writes the .npy files test_dtypes_wide reads (numpy 1.24): python3 make.py in this directory.
import numpy as np

np.save('i1.npy', np.array([[-128, -1, 0], [1, 100, 127]], dtype=np.int8))
np.save('u1.npy', np.array([0, 1, 128, 200, 255], dtype=np.uint8))
np.save('i8.npy', np.array([-(2**63), -1, 2**31, 2**53 + 1, 2**63 - 1], dtype=np.int64))
np.save('f8.npy', np.array([0.1, -2.5, 1e300, 5e-324, np.inf, -0.0, 1/3], dtype=np.float64))
np.save('f8_big_fortran.npy',
        np.asfortranarray(np.array([[1.25, 2.0, 0.1], [-3.0, 1e-20, 7.0]], dtype='>f8')))
np.save('f2.npy', np.array([0.1, 65504, -0.0, 6e-8], dtype=np.float16))
