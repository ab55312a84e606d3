/*
 * Native fast path of the STOMP frame codec (stompmq.protocol._frames).
 *
 * Why: the pure-Python parser and MESSAGE encoder were ~40 % of the engine thread's time
 * (docs/decisions/native-codec.md). This module does the same work for the common
 * frames in a few C calls per socket read or per delivery.
 *
 * The Python code stays the reference and the fallback:
 *
 * - scan() consumes only *complete, valid* frames from the start of the parser's buffer and
 *   stops ("defers") at the first frame it does not handle: one that is incomplete, breaks a
 *   rule or a limit, is a CONNECT/STOMP (version negotiation), or is close to a limit. It never
 *   raises ProtocolError and never leaves a half-parsed frame behind, so FrameParser._parse
 *   (protocol/parser.py) takes over at exactly the state the pure-Python loop would have
 *   reached, and every error message and every partial-feed state comes from Python.
 * - encode_message(), encode_message_tail() and encode_message_tail_headers() build the same bytes
 *   as their Python twins in protocol/encoder.py.
 *
 * tests/protocol run every parser and encoder test against both, and fuzz them against each
 * other (tests/protocol/test_native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <limits.h>

static PyTypeObject *FrameType;      /* stompmq.protocol.frame.Frame, a tuple subclass */
static PyObject *LocalProtocolError; /* stompmq.protocol.errors.LocalProtocolError */

/* ---- strings the parser hands out often, created once ------------------------------------ */

typedef struct {
    const char *text;
    Py_ssize_t len;
    PyObject *str;
} Known;

#define KNOWN(s) {s, sizeof(s) - 1, NULL}

/* Commands a client (or a test client) sends or receives; CONNECT and STOMP are deferred. */
static Known COMMANDS[] = {
    KNOWN("SEND"),    KNOWN("ACK"),     KNOWN("NACK"),       KNOWN("SUBSCRIBE"), KNOWN("UNSUBSCRIBE"),
    KNOWN("BEGIN"),   KNOWN("COMMIT"),  KNOWN("ABORT"),      KNOWN("DISCONNECT"), KNOWN("MESSAGE"),
    KNOWN("RECEIPT"), KNOWN("ERROR"),   KNOWN("CONNECTED"),  {NULL, 0, NULL},
};

/* Header names of the frames above: the engine looks them up by these (interned) literals. */
static Known NAMES[] = {
    KNOWN("destination"), KNOWN("content-length"), KNOWN("content-type"), KNOWN("receipt"),
    KNOWN("id"),          KNOWN("ack"),            KNOWN("subscription"), KNOWN("message-id"),
    KNOWN("transaction"), KNOWN("persistent"),     KNOWN("priority"),     KNOWN("expires"),
    KNOWN("receipt-id"),  KNOWN("message"),        KNOWN("redelivered"),  KNOWN("redelivery-count"),
    KNOWN("timestamp"),   KNOWN("requeue"),        KNOWN("prefetch-count"), KNOWN("selector"),
    {NULL, 0, NULL},
};

static PyObject *known(const Known *table, const char *s, Py_ssize_t len) {
    for (; table->text != NULL; table++) {
        if (table->len == len && table->text[0] == s[0] && memcmp(table->text, s, (size_t)len) == 0) {
            return Py_NewRef(table->str);
        }
    }
    return NULL;
}

static int init_known(Known *table) {
    for (; table->text != NULL; table++) {
        table->str = PyUnicode_InternFromString(table->text);
        if (table->str == NULL) return -1;
    }
    return 0;
}

/* A str from UTF-8 bytes the caller has already validated; pure ASCII takes one memcpy. */
static PyObject *text(const char *s, Py_ssize_t len, int ascii) {
    if (!ascii) return PyUnicode_DecodeUTF8(s, len, NULL);
    PyObject *u = PyUnicode_New(len, 127);
    if (u != NULL && len > 0) memcpy(PyUnicode_1BYTE_DATA(u), s, (size_t)len);
    return u;
}

/* ---- versions --------------------------------------------------------------------------- */

/* Escaping level of a STOMP version string: 0 for "1.0" (none), 1 for "1.1", 2 for "1.2"
 * (adds CR); -1 for anything else. */
static int escapes_of(PyObject *version) {
    if (!PyUnicode_Check(version) || PyUnicode_GET_LENGTH(version) != 3 ||
        PyUnicode_KIND(version) != PyUnicode_1BYTE_KIND) {
        return -1;
    }
    const Py_UCS1 *v = PyUnicode_1BYTE_DATA(version);
    if (v[0] != '1' || v[1] != '.' || v[2] < '0' || v[2] > '2') return -1;
    return v[2] - '0';
}

/* encoder.py's _table(): the same exception and message for a version STOMP does not have. */
static int checked_escapes(PyObject *version) {
    int escapes = escapes_of(version);
    if (escapes < 0) PyErr_Format(LocalProtocolError, "unsupported STOMP version %R", version);
    return escapes;
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* Unescape s[0:len] into out (at most len bytes) for `escapes`; -1 on an escape sequence the
 * version does not define, including a trailing lone backslash (Python reports those). */
static Py_ssize_t unescape(const char *s, Py_ssize_t len, char *out, int escapes) {
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '\\') {
            if (++i == len) return -1;
            switch (s[i]) {
            case 'n': c = '\n'; break;
            case 'c': c = ':'; break;
            case '\\': c = '\\'; break;
            case 'r':
                if (escapes < 2) return -1;
                c = '\r';
                break;
            default: return -1;
            }
        }
        out[o++] = c;
    }
    return o;
}

static Py_ssize_t as_size(PyObject *number) {
    Py_ssize_t value = PyLong_AsSsize_t(number);
    if (value == -1 && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        return PY_SSIZE_T_MAX; /* a limit beyond memory is no limit */
    }
    return value;
}

#define DEFER 0
#define DONE 1
#define FAILED (-1)

typedef struct {
    const char *b;  /* the buffer */
    Py_ssize_t n;   /* its length */
    int crlf;       /* line-end style of the last frame (FrameParser._crlf) */
    int escapes;    /* the session version's escaping level */
    Py_ssize_t max_body, max_header_bytes, max_headers;
    char *scratch;  /* unescaping space, grown on demand */
    Py_ssize_t scratch_size;
} Scan;

/* Parse the header lines of the block b[start:end] (after the command line) into `headers`;
 * *body_len is the first content-length, or -1. DEFER on anything the Python parser rejects. */
static int header_lines(Scan *s, Py_ssize_t start, Py_ssize_t end, int ascii, int unescaping, PyObject *headers,
                        Py_ssize_t *body_len) {
    const char *b = s->b;
    if (unescaping && s->scratch_size < end - start) {
        char *grown = PyMem_Realloc(s->scratch, (size_t)(end - start));
        if (grown == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        s->scratch = grown;
        s->scratch_size = end - start;
    }
    *body_len = -1;
    int seen_length = 0;
    Py_ssize_t line = start;
    while (line <= end) {
        const char *lf = memchr(b + line, '\n', (size_t)(end - line));
        Py_ssize_t stop = lf != NULL ? lf - b : end;
        Py_ssize_t next = stop + 1;
        if (stop > line && b[stop - 1] == '\r') stop--; /* the CR of a CRLF line end */
        if (memchr(b + line, '\r', (size_t)(stop - line)) != NULL) return DEFER; /* a raw CR: Python's */
        const char *colon = memchr(b + line, ':', (size_t)(stop - line));
        if (colon == NULL) return DEFER;
        const char *name = b + line, *value = colon + 1;
        Py_ssize_t name_len = colon - name, value_len = b + stop - value;
        if (unescaping) {
            char *out = s->scratch;
            name_len = unescape(name, name_len, out, s->escapes);
            if (name_len < 0) return DEFER;
            value_len = unescape(value, value_len, out + name_len, s->escapes);
            if (value_len < 0) return DEFER;
            name = out;
            value = out + name_len;
        }
        PyObject *key = known(NAMES, name, name_len);
        if (key == NULL) key = text(name, name_len, ascii);
        if (key == NULL) return FAILED;
        PyObject *val = text(value, value_len, ascii);
        if (val == NULL) {
            Py_DECREF(key);
            return FAILED;
        }
        PyObject *kept = PyDict_SetDefault(headers, key, val); /* the first occurrence wins */
        Py_DECREF(key);
        Py_DECREF(val);
        if (kept == NULL) return FAILED;
        if (!seen_length && name_len == 14 && memcmp(name, "content-length", 14) == 0) {
            seen_length = 1;
            if (value_len == 0) return DEFER;
            Py_ssize_t length = 0;
            for (Py_ssize_t i = 0; i < value_len; i++) {
                if (value[i] < '0' || value[i] > '9' || length > (PY_SSIZE_T_MAX - 9) / 10) return DEFER;
                length = length * 10 + (value[i] - '0');
                if (length > s->max_body) return DEFER; /* Python names the limit */
            }
            *body_len = length;
        }
        line = next;
    }
    return DONE;
}

/* Parse the frame at *pos if it is complete and valid; DONE appends it to frames and moves
 * *pos past it. */
static int one_frame(Scan *s, Py_ssize_t *pos, PyObject *frames) {
    const char *b = s->b;
    Py_ssize_t n = s->n, start = *pos;

    /* The earliest blank line, "\n\n" or "\n\r\n" (the Python searches find the same one). A
     * block that could only end past max_header_bytes is deferred: Python decides. */
    Py_ssize_t limit = s->max_header_bytes < n - start ? start + s->max_header_bytes : n;
    if (limit <= start) return DEFER; /* no block fits (a limit of 0 or less) */
    Py_ssize_t end, lines = 0;
    int crlf;
    const char *p = b + start;
    for (;;) {
        const char *lf = memchr(p, '\n', (size_t)(b + limit - p));
        if (lf == NULL) return DEFER;
        end = lf - b;
        if (end + 1 >= n) return DEFER;
        if (b[end + 1] == '\n') {
            crlf = 0;
            break;
        }
        if (b[end + 1] == '\r') {
            if (end + 2 >= n) return DEFER;
            if (b[end + 2] == '\n') {
                crlf = 1;
                break;
            }
        }
        lines++;
        p = lf + 1;
    }
    if (lines > s->max_headers) return DEFER;
    Py_ssize_t block = end - start;
    if (memchr(b + start, '\0', (size_t)block) != NULL) return DEFER;
    int ascii = 1;
    for (Py_ssize_t i = start; i < end; i++) {
        if ((unsigned char)b[i] >= 0x80) {
            ascii = 0;
            break;
        }
    }
    if (!ascii) { /* Python decodes the whole block, dropped repeats included */
        PyObject *check = PyUnicode_DecodeUTF8(b + start, block, NULL);
        if (check == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return FAILED;
            PyErr_Clear();
            return DEFER;
        }
        Py_DECREF(check);
    }

    /* The command line: ASCII letters only; CONNECT and STOMP negotiate, which Python does. */
    const char *lf = memchr(b + start, '\n', (size_t)block);
    Py_ssize_t command_end = lf != NULL ? lf - b : end;
    Py_ssize_t command_len = command_end - start;
    if (command_len > 0 && b[command_end - 1] == '\r') command_len--;
    if (command_len == 0) return DEFER;
    for (Py_ssize_t i = start; i < start + command_len; i++) {
        unsigned char c = (unsigned char)b[i] | 0x20;
        if (c < 'a' || c > 'z') return DEFER;
    }
    if ((command_len == 7 && memcmp(b + start, "CONNECT", 7) == 0) ||
        (command_len == 5 && memcmp(b + start, "STOMP", 5) == 0)) {
        return DEFER;
    }
    int unescaping = s->escapes > 0 && memchr(b + start, '\\', (size_t)block) != NULL &&
                     !(command_len == 9 && memcmp(b + start, "CONNECTED", 9) == 0);

    PyObject *headers = PyDict_New();
    if (headers == NULL) return FAILED;
    Py_ssize_t body_len = -1;
    if (lines > 0) {
        int done = header_lines(s, command_end + 1, end, ascii, unescaping, headers, &body_len);
        if (done != DONE) {
            Py_DECREF(headers);
            return done;
        }
    }

    Py_ssize_t body_start = end + (crlf ? 3 : 2), body_end;
    if (body_len >= 0) {
        body_end = body_start + body_len;
        if (body_end >= n || b[body_end] != '\0') {
            Py_DECREF(headers);
            return DEFER;
        }
    } else {
        Py_ssize_t stop = n - body_start > s->max_body ? body_start + s->max_body + 1 : n;
        if (stop < body_start) stop = body_start; /* a negative limit: no body fits */
        const char *nul = memchr(b + body_start, '\0', (size_t)(stop - body_start));
        if (nul == NULL) {
            Py_DECREF(headers);
            return DEFER;
        }
        body_end = nul - b;
    }

    PyObject *command = known(COMMANDS, b + start, command_len);
    if (command == NULL) command = text(b + start, command_len, 1);
    PyObject *body = PyBytes_FromStringAndSize(b + body_start, body_end - body_start);
    PyObject *frame = command != NULL && body != NULL ? FrameType->tp_alloc(FrameType, 3) : NULL;
    if (frame == NULL) {
        Py_XDECREF(command);
        Py_XDECREF(body);
        Py_DECREF(headers);
        return FAILED;
    }
    PyTuple_SET_ITEM(frame, 0, command);
    PyTuple_SET_ITEM(frame, 1, headers);
    PyTuple_SET_ITEM(frame, 2, body);
    int appended = PyList_Append(frames, frame);
    Py_DECREF(frame);
    if (appended < 0) return FAILED;
    s->crlf = crlf;
    *pos = body_end + 1;
    return DONE;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    /* bytes: a socket read parsed where it lies; bytearray: the parser's buffer of leftovers. */
    if (nargs != 6 || !(PyByteArray_Check(args[0]) || PyBytes_Check(args[0])) || !PyList_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan(buf: bytes | bytearray, pos: int, crlf: bool, version: str, limits: Limits, frames: list)");
        return NULL;
    }
    Scan s = {.b = PyBytes_Check(args[0]) ? PyBytes_AS_STRING(args[0]) : PyByteArray_AS_STRING(args[0]),
              .n = Py_SIZE(args[0])};
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    s.crlf = PyObject_IsTrue(args[2]);
    if (s.crlf < 0) return NULL;
    s.escapes = escapes_of(args[3]);
    if (s.escapes < 0) {
        PyErr_Format(PyExc_ValueError, "unsupported STOMP version %R", args[3]);
        return NULL;
    }
    PyObject *limits = args[4];
    if (!PyTuple_Check(limits) || PyTuple_GET_SIZE(limits) != 3) {
        PyErr_SetString(PyExc_TypeError, "limits must be a Limits(max_body, max_header_bytes, max_headers)");
        return NULL;
    }
    s.max_body = as_size(PyTuple_GET_ITEM(limits, 0));
    s.max_header_bytes = as_size(PyTuple_GET_ITEM(limits, 1));
    s.max_headers = as_size(PyTuple_GET_ITEM(limits, 2));
    if (PyErr_Occurred()) return NULL;

    const char *b = s.b;
    Py_ssize_t n = s.n;
    int done = DONE;
    while (pos < n && done == DONE) {
        if ((unsigned char)b[pos] < 'A') { /* heart-beat EOLs between frames; anything else: Python */
            for (;;) {
                if (b[pos] == '\n') {
                    pos++;
                } else if (b[pos] == '\r' && pos + 1 < n && b[pos + 1] == '\n') {
                    pos += 2;
                } else {
                    break;
                }
                if (pos >= n) break;
            }
            if (pos >= n || (unsigned char)b[pos] < 'A') break;
        }
        done = one_frame(&s, &pos, args[5]);
    }
    PyMem_Free(s.scratch);
    if (done == FAILED) return NULL;
    return Py_BuildValue("(nO)", pos, s.crlf ? Py_True : Py_False);
}

/* ---- encoding --------------------------------------------------------------------------- */

/* The UTF-8 bytes of a str: an ASCII str's own data, else a temporary bytes in *owner (not
 * PyUnicode_AsUTF8AndSize, which would attach a copy to a message's header for its lifetime). */
static int utf8(PyObject *str, const char **s, Py_ssize_t *len, PyObject **owner) {
    *owner = NULL;
    if (!PyUnicode_Check(str)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(str)->tp_name);
        return -1;
    }
    if (PyUnicode_IS_COMPACT_ASCII(str)) {
        *s = (const char *)PyUnicode_DATA(str);
        *len = PyUnicode_GET_LENGTH(str);
        return 0;
    }
    *owner = PyUnicode_AsUTF8String(str);
    if (*owner == NULL) return -1;
    *s = PyBytes_AS_STRING(*owner);
    *len = PyBytes_GET_SIZE(*owner);
    return 0;
}

/* Bytes added by escaping s[0:len] for `escapes` (encoder.py's _ESCAPE_TABLES). */
static Py_ssize_t escape_extra(const char *s, Py_ssize_t len, int escapes) {
    Py_ssize_t extra = 0;
    if (escapes == 0) return 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        char c = s[i];
        extra += c == '\\' || c == '\n' || c == ':' || (c == '\r' && escapes == 2);
    }
    return extra;
}

static char *put_escaped(char *out, const char *s, Py_ssize_t len, int escapes) {
    if (escapes == 0) {
        memcpy(out, s, (size_t)len);
        return out + len;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        char c = s[i];
        switch (c) {
        case '\\': *out++ = '\\'; *out++ = '\\'; break;
        case '\n': *out++ = '\\'; *out++ = 'n'; break;
        case ':': *out++ = '\\'; *out++ = 'c'; break;
        case '\r':
            if (escapes == 2) {
                *out++ = '\\';
                *out++ = 'r';
            } else {
                *out++ = c;
            }
            break;
        default: *out++ = c;
        }
    }
    return out;
}

static char *put(char *out, const char *s, Py_ssize_t len) {
    memcpy(out, s, (size_t)len);
    return out + len;
}

#define PUT_LITERAL(out, literal) put(out, literal, sizeof(literal) - 1)

/* Decimal digits of value into digits[32] (snprintf's format parsing was ~1 % of a delivery). */
static Py_ssize_t digits_of(long long value, char digits[32]) {
    char reversed[24];
    int count = 0, negative = value < 0;
    unsigned long long rest = negative ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        reversed[count++] = (char)('0' + rest % 10);
        rest /= 10;
    } while (rest != 0);
    Py_ssize_t length = 0;
    if (negative) digits[length++] = '-';
    while (count > 0) digits[length++] = reversed[--count];
    return length;
}

/* Decimal digits of an int (a PyLong, or anything with __index__), into digits[32]. */
static Py_ssize_t decimal(PyObject *number, char digits[32]) {
    long long value = PyLong_AsLongLong(number);
    if (value == -1 && PyErr_Occurred()) return -1;
    return digits_of(value, digits);
}

/* encode_message(subscription, message_id, destination, ack, redeliveries, version, tail) */
static PyObject *encode_message(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_message takes 7 arguments");
        return NULL;
    }
    PyObject *ack = args[3];
    int escapes = checked_escapes(args[5]);
    if (escapes < 0) return NULL;
    const char *sub, *dest, *ack_s = NULL;
    Py_ssize_t sub_len, dest_len, ack_len = 0;
    PyObject *sub_owner = NULL, *dest_owner = NULL, *ack_owner = NULL, *result = NULL;
    Py_buffer tail = {0};
    char id[32], count[32], deliveries[32];
    Py_ssize_t id_len, count_len = 1, deliveries_len = 0;
    int redelivered;
    if (utf8(args[0], &sub, &sub_len, &sub_owner) < 0) goto done;
    if ((id_len = decimal(args[1], id)) < 0) goto done;
    if (utf8(args[2], &dest, &dest_len, &dest_owner) < 0) goto done;
    if (ack != Py_None && utf8(ack, &ack_s, &ack_len, &ack_owner) < 0) goto done;
    if ((redelivered = PyObject_IsTrue(args[4])) < 0) goto done;
    if (redelivered) {
        if ((count_len = decimal(args[4], count)) < 0) goto done;
        /* redeliveries + 1, which decimal() just read as a long long: only its maximum overflows */
        long long n = PyLong_AsLongLong(args[4]);
        deliveries_len = n == LLONG_MAX
            ? snprintf(deliveries, sizeof deliveries, "%llu", (unsigned long long)n + 1u)
            : digits_of(n + 1, deliveries);
    } else {
        count[0] = '0';
    }
    if (PyObject_GetBuffer(args[6], &tail, PyBUF_SIMPLE) < 0) goto done;

    Py_ssize_t size = sizeof("MESSAGE\nsubscription:") - 1 + sub_len + escape_extra(sub, sub_len, escapes) +
                      sizeof("\nmessage-id:") - 1 + id_len + sizeof("\ndestination:") - 1 + dest_len +
                      escape_extra(dest, dest_len, escapes) + 1 +
                      (ack_s != NULL ? sizeof("ack:\n") - 1 + ack_len : 0) +
                      (redelivered ? sizeof("redelivered:true\n") - 1 : sizeof("redelivered:false\n") - 1) +
                      sizeof("redelivery-count:\n") - 1 + count_len +
                      (redelivered ? sizeof("JMSXDeliveryCount:\n") - 1 + deliveries_len : 0) + tail.len;
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    out = PUT_LITERAL(out, "MESSAGE\nsubscription:");
    out = put_escaped(out, sub, sub_len, escapes);
    out = PUT_LITERAL(out, "\nmessage-id:");
    out = put(out, id, id_len);
    out = PUT_LITERAL(out, "\ndestination:");
    out = put_escaped(out, dest, dest_len, escapes);
    *out++ = '\n';
    if (ack_s != NULL) {
        out = PUT_LITERAL(out, "ack:");
        out = put(out, ack_s, ack_len);
        *out++ = '\n';
    }
    out = redelivered ? PUT_LITERAL(out, "redelivered:true\n") : PUT_LITERAL(out, "redelivered:false\n");
    out = PUT_LITERAL(out, "redelivery-count:");
    out = put(out, count, count_len);
    *out++ = '\n';
    if (redelivered) {
        out = PUT_LITERAL(out, "JMSXDeliveryCount:");
        out = put(out, deliveries, deliveries_len);
        *out++ = '\n';
    }
    put(out, tail.buf, tail.len);
done:
    if (tail.obj != NULL) PyBuffer_Release(&tail);
    Py_XDECREF(sub_owner);
    Py_XDECREF(dest_owner);
    Py_XDECREF(ack_owner);
    return result;
}

/* Whether a subscriber of `escapes` can receive this header as it is (encoder.py's _expressible):
 * 1.2 any; 1.1 none with a CR (it has no escape for one); 1.0 none with a CR or a newline, nor a
 * colon in the name. */
static int expressible(const char *name, Py_ssize_t name_len, const char *value, Py_ssize_t value_len,
                       int escapes) {
    if (escapes == 2) return 1;
    if (memchr(name, '\r', (size_t)name_len) != NULL || memchr(value, '\r', (size_t)value_len) != NULL) return 0;
    return escapes == 1 || (memchr(name, '\n', (size_t)name_len) == NULL &&
                            memchr(name, ':', (size_t)name_len) == NULL &&
                            memchr(value, '\n', (size_t)value_len) == NULL);
}

/* Size (fill == NULL) or write (fill != NULL) the user header block; returns the size or -1. */
static Py_ssize_t header_block(PyObject *headers, int escapes, char *fill) {
    Py_ssize_t size = 0, at = 0;
    PyObject *key, *value;
    while (PyDict_Next(headers, &at, &key, &value)) {
        const char *k, *v;
        Py_ssize_t k_len, v_len;
        PyObject *k_owner, *v_owner;
        if (utf8(key, &k, &k_len, &k_owner) < 0) return -1;
        if (utf8(value, &v, &v_len, &v_owner) < 0) {
            Py_XDECREF(k_owner);
            return -1;
        }
        if (expressible(k, k_len, v, v_len, escapes)) { /* left out of this delivery otherwise */
            if (fill != NULL) {
                fill = put_escaped(fill, k, k_len, escapes);
                *fill++ = ':';
                fill = put_escaped(fill, v, v_len, escapes);
                *fill++ = '\n';
            } else {
                size += k_len + v_len + 2 + escape_extra(k, k_len, escapes) + escape_extra(v, v_len, escapes);
            }
        }
        Py_XDECREF(k_owner);
        Py_XDECREF(v_owner);
    }
    return size;
}

/* The tail of encode_message_tail; with body NULL only up to its blank line (the body of
 * `length` bytes and its NUL follow by reference: encode_message_tail_headers). */
static PyObject *message_tail(PyObject *const *args, const Py_buffer *body, Py_ssize_t length) {
    PyObject *headers = args[3];
    if (!PyDict_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a dict");
        return NULL;
    }
    /* Like the Python, which looks at the version only to encode headers. */
    int escapes = PyDict_GET_SIZE(headers) > 0 ? checked_escapes(args[5]) : 0;
    if (escapes < 0) return NULL;
    char priority[32], timestamp[32], expires[32], digits[32];
    Py_ssize_t priority_len, timestamp_len, expires_len = 0, length_len;
    if ((priority_len = decimal(args[0], priority)) < 0) return NULL;
    if ((timestamp_len = decimal(args[1], timestamp)) < 0) return NULL;
    if (args[2] != Py_None && (expires_len = decimal(args[2], expires)) < 0) return NULL;
    PyObject *result = NULL;
    length_len = digits_of(length, digits);
    Py_ssize_t block = header_block(headers, escapes, NULL);
    if (block >= 0) {
        Py_ssize_t size = sizeof("priority:\ntimestamp:\ncontent-length:\n\n") - 1 + priority_len + timestamp_len +
                          (args[2] != Py_None ? sizeof("expires:\n") - 1 + expires_len : 0) + length_len + block +
                          (body != NULL ? body->len + 1 : 0);
        result = PyBytes_FromStringAndSize(NULL, size);
    }
    if (result != NULL) {
        char *out = PyBytes_AS_STRING(result);
        out = PUT_LITERAL(out, "priority:");
        out = put(out, priority, priority_len);
        out = PUT_LITERAL(out, "\ntimestamp:");
        out = put(out, timestamp, timestamp_len);
        if (args[2] != Py_None) {
            out = PUT_LITERAL(out, "\nexpires:");
            out = put(out, expires, expires_len);
        }
        out = PUT_LITERAL(out, "\ncontent-length:");
        out = put(out, digits, length_len);
        *out++ = '\n';
        if (block > 0 && header_block(headers, escapes, out) < 0) Py_CLEAR(result);
        if (result != NULL) {
            out += block;
            *out++ = '\n';
            if (body != NULL) {
                out = put(out, body->buf, body->len);
                *out = '\0';
            }
        }
    }
    return result;
}

/* encode_message_tail(priority, timestamp, expires, headers, body, version) */
static PyObject *encode_message_tail(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "encode_message_tail takes 6 arguments");
        return NULL;
    }
    Py_buffer body;
    if (PyObject_GetBuffer(args[4], &body, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = message_tail(args, &body, body.len);
    PyBuffer_Release(&body);
    return result;
}

/* encode_message_tail_headers(priority, timestamp, expires, headers, length, version) */
static PyObject *encode_message_tail_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "encode_message_tail_headers takes 6 arguments");
        return NULL;
    }
    Py_ssize_t length = PyLong_AsSsize_t(args[4]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    if (length < 0) {
        PyErr_SetString(PyExc_ValueError, "length must not be negative");
        return NULL;
    }
    return message_tail(args, NULL, length);
}

/* ---- headers_without: a frame's headers minus some names -------------------------------- */

/* headers_without(headers, names) -> dict: a copy of the dict without the keys in the set (the
   headers a SEND forwards in its MESSAGE: every SEND takes this path, and the Python loop over
   its few headers cost more than the copy).  Same key order as the Python reference. */
static PyObject *headers_without(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "headers_without() takes exactly 2 arguments");
        return NULL;
    }
    PyObject *headers = args[0], *names = args[1];
    if (!PyDict_CheckExact(headers) || !PyAnySet_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "headers_without() takes a dict and a set");
        return NULL;
    }
    PyObject *copy = PyDict_Copy(headers);
    if (copy == NULL) return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(headers, &pos, &key, &value)) {
        int found = PySet_Contains(names, key);
        if (found < 0 || (found && PyDict_DelItem(copy, key) < 0)) {
            Py_DECREF(copy);
            return NULL;
        }
    }
    return copy;
}

/* ---- the module ------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buf, pos, crlf, version, limits, frames) -> (pos, crlf): append the complete frames from pos on."},
    {"encode_message", (PyCFunction)(void (*)(void))encode_message, METH_FASTCALL,
     "encode_message(subscription, message_id, destination, ack, redeliveries, version, tail) -> bytes."},
    {"encode_message_tail", (PyCFunction)(void (*)(void))encode_message_tail, METH_FASTCALL,
     "encode_message_tail(priority, timestamp, expires, headers, body, version) -> bytes."},
    {"encode_message_tail_headers", (PyCFunction)(void (*)(void))encode_message_tail_headers, METH_FASTCALL,
     "encode_message_tail_headers(priority, timestamp, expires, headers, length, version) -> bytes: the tail up "
     "to its blank line."},
    {"headers_without", (PyCFunction)(void (*)(void))headers_without, METH_FASTCALL,
     "headers_without(headers, names) -> dict: a copy of headers without the keys in names."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stompmq.protocol._frames",
    .m_doc = "Native fast path of the STOMP frame codec; parser.py and encoder.py are the reference.",
    .m_size = -1,
    .m_methods = methods,
};

static PyObject *attribute_of(const char *module_name, const char *name) {
    PyObject *m = PyImport_ImportModule(module_name);
    if (m == NULL) return NULL;
    PyObject *value = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return value;
}

PyMODINIT_FUNC PyInit__frames(void) {
    if (init_known(COMMANDS) < 0 || init_known(NAMES) < 0) return NULL;
    PyObject *frame = attribute_of("stompmq.protocol.frame", "Frame");
    if (frame == NULL) return NULL;
    if (!PyType_Check(frame) || !PyType_IsSubtype((PyTypeObject *)frame, &PyTuple_Type)) {
        Py_DECREF(frame);
        PyErr_SetString(PyExc_TypeError, "stompmq.protocol.frame.Frame must be a tuple subclass");
        return NULL;
    }
    FrameType = (PyTypeObject *)frame;
    LocalProtocolError = attribute_of("stompmq.protocol.errors", "LocalProtocolError");
    if (LocalProtocolError == NULL) return NULL;
    return PyModule_Create(&module);
}
