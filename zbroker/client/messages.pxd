# Cython declarations for messages.py (read only when it is compiled; the .py runs as it
# is without them). Message is an extension type there (``cython.cclass`` in the .py) with
# these fields; ``cython.no_gc`` (also in the .py: Cython takes that directive from a class's
# own decorators only) keeps the cyclic garbage collector from tracking it.


cdef class Message:
    cdef public object _headers, incarnation, log_seq, origin, pattern, payload
    cdef public object payload_type, raw, redelivered, seq, timestamp, topic
