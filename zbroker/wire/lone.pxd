# Cython declarations for lone.py (read only when it is compiled; the .py runs as it is
# without them). The reader becomes a final extension type whose frame is a read-only
# pointer into the bytes it holds (a byte read is a C array access) and whose steps are C methods.

cimport cython


@cython.final
cdef class _Reader:
    cdef const unsigned char* b
    cdef bytes frame
    cdef Py_ssize_t pos, end, at
    cdef unsigned long long value

    @cython.locals(pos=Py_ssize_t, i=Py_ssize_t, v="unsigned long long",
                   b="const unsigned char*")
    cdef bint big(self, int k) noexcept
    @cython.locals(t=int)
    cdef bint sized(self, bint small, int first) noexcept
    @cython.locals(t=int)
    cdef bint uint(self) noexcept
    @cython.locals(pos=Py_ssize_t)
    cdef bint expect(self, int a, int b) noexcept


@cython.locals(r=_Reader, b="const unsigned char*", end=Py_ssize_t, nul=Py_ssize_t,
               topic_at=Py_ssize_t, topic_n=Py_ssize_t, origin_at=Py_ssize_t,
               origin_n=Py_ssize_t, payload_at=Py_ssize_t, payload_n=Py_ssize_t,
               inc="unsigned long long", seq="unsigned long long")
cpdef object lone_delivery(bytes frame)
