# Cython declarations for heads.py (read only when it is compiled; the .py runs as it is
# without them). The cursor becomes a final extension type whose frame is a read-only typed
# memoryview (of a bytes object or of a view of libzmq's message: a byte read is a C array
# access either way) and whose steps are C methods with C locals: run from the source, the
# walk makes a few Python calls and many int objects per entry.

cimport cython

cdef int _DEPTH
cdef unsigned long long _MSGR, _I64, _TS64, _TS32, _TS_INT, _MAG64, _ALL64
cdef tuple _NO


@cython.final
cdef class _Cursor:
    cdef const unsigned char[:] b
    cdef Py_ssize_t pos, end
    cdef unsigned long long value

    @cython.locals(pos=Py_ssize_t)
    cdef int byte(self) noexcept
    @cython.locals(pos=Py_ssize_t, i=Py_ssize_t, v="unsigned long long",
                   b="const unsigned char[:]")
    cdef bint big(self, int k) noexcept
    cdef bint over(self, Py_ssize_t n) noexcept
    cdef bint count(self, int t) noexcept
    cdef bint uint(self, int t) noexcept
    @cython.locals(i=Py_ssize_t, end=Py_ssize_t, j=Py_ssize_t, c=int, d=int, lo=int, hi=int,
                   more=int, b="const unsigned char[:]")
    cdef bint utf8(self, Py_ssize_t n) noexcept
    @cython.locals(t=int)
    cdef bint items(self, Py_ssize_t n, int depth, bint pairs) noexcept
    cdef bint text(self, int t) noexcept
    @cython.locals(t=int)
    cdef bint skip(self, int depth) noexcept
    cdef bint ts(self, int t) noexcept
    @cython.locals(t=int, n="unsigned long long")
    cdef bint fields(self, bint names) noexcept
    @cython.locals(seq="unsigned long long")
    cdef bint entry(self) noexcept
    @cython.locals(at=Py_ssize_t, t=int)
    cpdef tuple publish(self)
    @cython.locals(at=Py_ssize_t, n="unsigned long long", first="unsigned long long",
                   last="unsigned long long")
    cpdef tuple run(self)
