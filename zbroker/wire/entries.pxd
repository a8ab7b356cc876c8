# The C writer of entries.py (read only when it is compiled; Cython inlines _write into
# the module). What it writes is msgpack as a default msgpack.Packer writes it: bin for
# bytes, the smallest encoding of each unsigned int, float64 for a float.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport uint64_t
from libc.string cimport memcpy


cdef inline Py_ssize_t _uint_size(unsigned long long v) noexcept nogil:
    """Bytes of msgpack's smallest encoding of ``v`` (its type byte included)."""
    if v < 0x80:
        return 1
    if v < 0x100:
        return 2
    if v < 0x10000:
        return 3
    if v < 0x100000000ULL:
        return 5
    return 9


cdef inline Py_ssize_t _entry_size(Py_ssize_t size, unsigned long long s) noexcept nogil:
    """Bytes of an entry of a ``size``-byte payload and sequence ``s``: its array header,
    the bin header and payload, format and nil, the sequence, the float64 time."""
    return 1 + (2 if size < 0x100 else (3 if size < 0x10000 else 5)) + size + 2 + _uint_size(s) + 9


cdef inline unsigned char* _big(unsigned char* p, unsigned long long v, int n) noexcept nogil:
    """``v``'s ``n`` low bytes at ``p``, big-endian; returns the next position."""
    cdef int k
    for k in range(n):
        p[k] = (v >> (8 * (n - 1 - k))) & 0xFF
    return p + n


cdef inline unsigned char* _uint(unsigned char* p, unsigned long long s) noexcept nogil:
    """``s`` in msgpack's smallest encoding at ``p``; returns the next position."""
    if s < 0x80:
        p[0] = <unsigned char>s
        return p + 1
    if s < 0x100:
        p[0] = 0xCC
        return _big(p + 1, s, 1)
    if s < 0x10000:
        p[0] = 0xCD
        return _big(p + 1, s, 2)
    if s < 0x100000000ULL:
        p[0] = 0xCE
        return _big(p + 1, s, 4)
    p[0] = 0xCF
    return _big(p + 1, s, 8)


cdef inline unsigned char* _header(unsigned char* p, unsigned char small, unsigned char t16,
                                   Py_ssize_t n, Py_ssize_t small_below) noexcept nogil:
    """An array's or a bin's header: ``small`` (fixarray's 0x90 | n, or bin 8's 0xc4 n) below
    ``small_below``, else the 16-bit type ``t16`` or the 32-bit one after it."""
    if n < small_below:
        if small == 0xC4:
            p[0] = 0xC4
            p[1] = <unsigned char>n
            return p + 2
        p[0] = small | <unsigned char>n
        return p + 1
    if n < 0x10000:
        p[0] = t16
        return _big(p + 1, n, 2)
    p[0] = t16 + 1
    return _big(p + 1, n, 4)


cdef inline object _write(list entries):
    """The array of ``entries`` as bytes, or None if one is not plain (see written)."""
    cdef Py_ssize_t n = PyList_GET_SIZE(entries), i, size
    cdef Py_ssize_t total = 1 if n < 16 else (3 if n < 0x10000 else 5)
    cdef object e, payload, fmt, seq, ts
    cdef unsigned long long s
    cdef uint64_t bits
    cdef double d
    cdef unsigned char* p
    cdef unsigned char* end
    for i in range(n):
        e = <object>PyList_GET_ITEM(entries, i)
        if type(e) is not list or PyList_GET_SIZE(e) != 5:
            return None
        payload = <object>PyList_GET_ITEM(e, 0)
        fmt = <object>PyList_GET_ITEM(e, 1)
        seq = <object>PyList_GET_ITEM(e, 3)
        ts = <object>PyList_GET_ITEM(e, 4)
        if (
            type(payload) is not bytes
            or type(fmt) is not int
            or <object>PyList_GET_ITEM(e, 2) is not None
            or type(seq) is not int
            or type(ts) is not float
            or not (fmt == 0 or fmt == 1)
        ):
            return None
        try:
            s = seq  # (negative or past 64 bits: OverflowError, and Packer's own error)
        except OverflowError:
            return None
        size = PyBytes_GET_SIZE(payload)
        if size >= 0x100000000LL:
            return None  # (Packer refuses it: let it say so)
        total += _entry_size(size, s)
    # (nothing between the two passes runs Python code or releases the GIL: the entries
    # are as measured; each is still checked to fit before it is written)
    out = PyBytes_FromStringAndSize(NULL, total)
    p = <unsigned char*>PyBytes_AS_STRING(out)
    end = p + total
    p = _header(p, 0x90, 0xDC, n, 16)
    for i in range(n):
        e = <object>PyList_GET_ITEM(entries, i)
        payload = <object>PyList_GET_ITEM(e, 0)
        size = PyBytes_GET_SIZE(payload)
        s = <object>PyList_GET_ITEM(e, 3)
        if end - p < _entry_size(size, s):
            return None
        p[0] = 0x95
        p = _header(p + 1, 0xC4, 0xC5, size, 0x100)
        memcpy(p, PyBytes_AS_STRING(payload), size)
        p += size
        p[0] = 1 if <object>PyList_GET_ITEM(e, 1) == 1 else 0
        p[1] = 0xC0
        p = _uint(p + 2, s)
        d = PyFloat_AS_DOUBLE(<object>PyList_GET_ITEM(e, 4))
        memcpy(&bits, &d, 8)
        p[0] = 0xCB
        p = _big(p + 1, bits, 8)
    return out


cdef inline object _number(bytes frame, list spans, unsigned long long seq, bytes ts,
                           bint header):
    """The publish entries at ``spans`` in ``frame`` (start and end of each one's three
    fields) as an array of entries numbered from ``seq`` + 1, each ended by ``ts`` (a
    packed float64), the array's header left out unless ``header``; None if a span is not
    within the frame or ``ts`` is not 9 bytes."""
    cdef Py_ssize_t k = PyList_GET_SIZE(spans), n = k // 2, i, a, b
    cdef Py_ssize_t size = PyBytes_GET_SIZE(frame)
    cdef Py_ssize_t total = (1 if n < 16 else (3 if n < 0x10000 else 5)) if header else 0
    cdef const char* src = PyBytes_AS_STRING(frame)
    cdef unsigned char* p
    if PyBytes_GET_SIZE(ts) != 9 or k != 2 * n:
        return None
    for i in range(n):
        a = <object>PyList_GET_ITEM(spans, 2 * i)
        b = <object>PyList_GET_ITEM(spans, 2 * i + 1)
        if a < 0 or b < a or b > size:
            return None
        total += 1 + (b - a) + _uint_size(seq + 1 + i) + 9
    out = PyBytes_FromStringAndSize(NULL, total)
    p = <unsigned char*>PyBytes_AS_STRING(out)
    if header:
        p = _header(p, 0x90, 0xDC, n, 16)
    for i in range(n):
        a = <object>PyList_GET_ITEM(spans, 2 * i)
        b = <object>PyList_GET_ITEM(spans, 2 * i + 1)
        p[0] = 0x95
        memcpy(p + 1, src + a, b - a)
        p = _uint(p + 1 + (b - a), seq + 1 + i)
        memcpy(p, PyBytes_AS_STRING(ts), 9)
        p += 9
    return out
