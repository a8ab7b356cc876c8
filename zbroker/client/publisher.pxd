cimport cython

# Cython declarations for publisher.py (read only when it is compiled; the .py is
# unchanged and runs as it is without them). The Publisher becomes an extension type
# whose state is C fields: publish() read and wrote a dozen instance attributes per
# message, each a dictionary lookup, and the publisher is the busiest process of a flood.
# Attributes tests or other modules read are ``readonly``/``public``.

cdef class Publisher:
    cdef object _address, _fanout, _credentials, _check, _wake
    cdef readonly object _lock
    cdef object _push, _send, _run_head, _ctx
    cdef Py_ssize_t _hwm
    cdef dict _topic_heads
    cdef double _timeout, _batch_since, _last_send
    cdef bint _closed, _runs
    cdef readonly list _batch, _starts
    cdef readonly Py_ssize_t _batch_bytes
    cdef Py_ssize_t _batch_item_max, _frame_max, _batch_full
    cdef public object persistent, producer
    cdef public bint armed
    cdef public int tail_poll
    cdef bint _flood


@cython.locals(n=Py_ssize_t)
cpdef object _entry(str topic, bytes head, object payload, object headers)
