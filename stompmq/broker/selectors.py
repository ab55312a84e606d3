"""JMS message selectors over STOMP headers: parsed once per SUBSCRIBE, evaluated per message.

Theory of operation.  ``compile_selector(text)`` tokenizes and parses the JMS message-selector
grammar (the SQL-92 conditional subset of JMS 1.1 §3.8.1) into a tree, checks its types, and
turns the tree into nested closures, so a delivery costs one call per node and no parsing.  A
closure takes the message (``StoredMessage`` or ``StreamMessage``) and returns ``True``,
``False`` or ``None`` (JMS's *unknown*); a message matches only when the whole selector is
``True``, as JMS's three-valued logic requires.

Values are what STOMP carries, made usable:

* An identifier names a STOMP header (case-sensitive); a name that is not an identifier
  (``x-tenant``) is written in double quotes (``"x-tenant" = 'acme'``), SQL's quoted identifier.
  A missing header is NULL.  ``JMS…`` names resolve to what STOMP calls them (``JMSPriority`` →
  the message's priority, ``JMSCorrelationID`` → ``correlation-id``, ``JMSType`` → ``type``,
  …: ``JMS_NAMES``), and the broker's own facts (``priority``, ``timestamp``, ``message-id``,
  ``redelivered``, ``redelivery-count``, ``expires``) are available under their STOMP names.
* A header is a string.  Compared with a number, or used in arithmetic, a string that spells a
  number (``5``, ``-2.5``, ``1e3``) is that number, and any other string is unknown; compared
  with a boolean, ``true``/``false`` (any case) is that boolean.  So ``price BETWEEN 5 AND 10``
  matches ``price:5.5`` and ``price * 2 > 30`` works on headers (neither does on ActiveMQ, which
  compares a STOMP header only as a string).
* Strings compare with ``=`` and ``<>`` only; ``<`` on two strings is unknown (JMS).  Integer
  arithmetic is integral (``7 / 2`` is 3, as Java's ``long``); a division by zero is unknown.
* ``IN`` takes literals of any type, each compared as ``=`` would; ``LIKE`` applies to strings
  (``%`` any run, ``_`` one character, an optional one-character ``ESCAPE``).

The full rule table, beside ActiveMQ's behaviour, is in docs/selectors.md.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any, Protocol

from ..storage.header_filter import HeaderFilter, HeaderMatch
from .errors import ClientError

#: A selector is refused above this length: it is compiled into nested closures, and Python's
#: recursion limit bounds how deep they may nest.
MAX_SELECTOR_LENGTH = 4096
#: And above this nesting depth (parentheses, NOT, operators), for the same reason.
MAX_DEPTH = 100

Value = Any  # str | int | float | bool | None: what an expression yields
Eval = Callable[[Any], Value]


class SelectorMessage(Protocol):
    """What a selector reads of a message (``StoredMessage`` and ``StreamMessage`` have it)."""

    seq: int
    priority: int
    headers: dict[str, str]
    timestamp: int
    redeliveries: int
    expires: int | None


class SelectorError(ClientError):
    """A malformed selector: the message names the position (1-based character) and the problem."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        super().__init__(f"invalid selector at character {position + 1}: {problem} (selector: {text!r})")
        self.position = position


class Selector:
    """A compiled selector: ``matches(message)`` is true when the selector evaluates to TRUE;
    ``prefilter``, when not None, is true of every stored row it matches (storage/header_filter.py)."""

    __slots__ = ("text", "_evaluate", "prefilter")

    def __init__(self, text: str, evaluate: Eval, prefilter: HeaderFilter | None = None) -> None:
        self.text = text
        self._evaluate = evaluate
        self.prefilter = prefilter

    def matches(self, message: SelectorMessage) -> bool:
        return self._evaluate(message) is True

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def compile_selector(text: str) -> Selector | None:
    """The compiled selector of a SUBSCRIBE's ``selector`` header; None for an empty one (all match).

    Raises ``SelectorError`` naming the position of the first problem."""
    if not text.strip():
        return None
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(text, MAX_SELECTOR_LENGTH, f"longer than {MAX_SELECTOR_LENGTH} characters")
    parser = _Parser(text)
    node = parser.parse()
    if node.kind not in (_BOOL, _ANY):
        raise SelectorError(text, node.position, "the selector is not a condition")
    return Selector(text, _truth(node).evaluate, node.prefilter)


# --- tokens -------------------------------------------------------------------------------------

_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"})
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<approx>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?|\d+[eE][+-]?\d+[fFdD]?|\d+[fFdD])
  | (?P<hex>0[xX][0-9a-fA-F]+[lL]?)
  | (?P<int>\d+[lL]?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")+")
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|<=|>=|[=<>+\-*/(),])
    """,
    re.VERBOSE,
)


class _Token:
    __slots__ = ("kind", "text", "value", "position")

    def __init__(self, kind: str, text: str, value: Value, position: int) -> None:
        self.kind, self.text, self.value, self.position = kind, text, value, position


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            if text.startswith('""', position):
                raise SelectorError(text, position, "an empty quoted name")
            if text[position] in "'\"":
                raise SelectorError(text, position, "unterminated quote")
            raise SelectorError(text, position, f"unexpected character {text[position]!r}")
        kind = match.lastgroup
        assert kind is not None
        raw = match.group()
        if kind == "approx":
            tokens.append(_Token("literal", raw, float(raw.rstrip("fFdD")), position))
        elif kind == "hex":
            tokens.append(_Token("literal", raw, int(raw.rstrip("lL"), 16), position))
        elif kind == "int":
            tokens.append(_Token("literal", raw, int(raw.rstrip("lL")), position))
        elif kind == "string":
            tokens.append(_Token("literal", raw, raw[1:-1].replace("''", "'"), position))
        elif kind == "quoted":
            tokens.append(_Token("name", raw, raw[1:-1].replace('""', '"'), position))
        elif kind == "name":
            upper = raw.upper()
            if upper in ("TRUE", "FALSE"):
                tokens.append(_Token("literal", raw, upper == "TRUE", position))
            elif upper in _KEYWORDS:
                tokens.append(_Token(upper, raw, None, position))
            else:
                tokens.append(_Token("name", raw, raw, position))
        elif kind == "op":
            tokens.append(_Token(raw, raw, None, position))
        position = match.end()
    tokens.append(_Token("end", "", None, len(text)))
    return tokens


# --- the tree: a node knows its static type and compiles itself to a closure ----------------------

_BOOL, _NUM, _STR, _ANY, _NULL = "boolean", "number", "string", "any", "null"


class _Node:
    """An expression: ``kind`` is its static type (``_ANY`` for a header, known only per message)."""

    __slots__ = ("kind", "position", "evaluate", "constant", "header", "prefilter")

    def __init__(self, kind: str, position: int, evaluate: Eval, constant: Value = None,
                 is_constant: bool = False, header: str | None = None) -> None:
        self.kind, self.position, self.evaluate = kind, position, evaluate
        self.constant = (constant,) if is_constant else None
        self.header = header  # the header it reads, if it is one: comparisons read it in place
        #: a condition on stored headers true whenever this condition is (None: none known)
        self.prefilter: HeaderFilter | None = None


# --- prefilters: what a store may test in its scan (storage/header_filter.py) ----------------------

def _header_test(node: _Node, name: str, values: frozenset[str] | None) -> _Node:
    """``node``, a condition TRUE only if header ``name`` is one of ``values`` (None: present),
    with that as its prefilter.  A name a JSON path cannot quote plainly gets none, and so does a
    value with a NUL (SQLite's ``json_extract`` ends its text there)."""
    if '"' not in name and "\\" not in name and not any("\0" in value for value in values or ()):
        node.prefilter = ((HeaderMatch(name, values),),)
    return node


def _prefilter_of(dominant: bool, nodes: list[_Node]) -> HeaderFilter | None:
    """The prefilter of an AND (``dominant`` False) or OR (True) of ``nodes``: an OR's is the
    union of its sides' when each has one; an AND's the conjunction of its sides' that are a
    single term (leaving a side out only widens it)."""
    filters = [node.prefilter for node in nodes]
    if dominant:
        if any(f is None for f in filters):
            return None
        return tuple(term for f in filters if f is not None for term in f)
    term = tuple(match for f in filters if f is not None and len(f) == 1 for match in f[0])
    return (term,) if term else None


def _literal(value: Value, position: int) -> _Node:
    if value is None:
        kind = _NULL
    elif isinstance(value, bool):
        kind = _BOOL
    elif isinstance(value, str):
        kind = _STR
    else:
        kind = _NUM
    return _Node(kind, position, lambda _m: value, value, True)


# --- identifiers --------------------------------------------------------------------------------

def _header(name: str) -> Eval:
    return lambda m: m.headers.get(name)


def _expiration(m: SelectorMessage) -> int:
    return m.expires or 0


def _delivery_mode(m: SelectorMessage) -> str:
    return "PERSISTENT" if m.headers.get("persistent", "").lower() == "true" else "NON_PERSISTENT"


#: The broker's own facts under their STOMP header names: (static type, getter).
_FACTS: dict[str, tuple[str, Eval]] = {
    "priority": (_NUM, operator.attrgetter("priority")),
    "timestamp": (_NUM, operator.attrgetter("timestamp")),
    "message-id": (_STR, lambda m: str(m.seq)),
    "redelivered": (_BOOL, lambda m: m.redeliveries > 0),
    "redelivery-count": (_NUM, operator.attrgetter("redeliveries")),
    "expires": (_NUM, _expiration),
}
#: JMS header and property names, and what each is on STOMP: a fact above or a header.
JMS_NAMES: dict[str, str] = {
    "JMSPriority": "priority",
    "JMSTimestamp": "timestamp",
    "JMSMessageID": "message-id",
    "JMSRedelivered": "redelivered",
    "JMSExpiration": "expires",
    "JMSCorrelationID": "correlation-id",
    "JMSType": "type",
    "JMSReplyTo": "reply-to",
    "JMSXGroupID": "JMSXGroupID",
    "JMSXGroupSeq": "JMSXGroupSeq",
    "JMSXUserID": "JMSXUserID",
}


def _identifier(name: str, position: int) -> _Node:
    if name == "JMSDeliveryMode":
        return _Node(_STR, position, _delivery_mode)
    if name == "JMSXDeliveryCount":
        return _Node(_NUM, position, lambda m: m.redeliveries + 1)
    name = JMS_NAMES.get(name, name)
    fact = _FACTS.get(name)
    if fact is not None:
        return _Node(fact[0], position, fact[1])
    return _Node(_ANY, position, _header(name), header=name)


# --- conversions of a header's string when the other side is typed --------------------------------

_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


#: Header strings read as numbers lately: a producer sends the same few values often, and the
#: two regular expressions are most of what a header-against-number test costs.  Bounded: cleared
#: when full.
_NUMBERS: dict[str, int | float | None] = {}
_NUMBERS_MAX = 1024


def _string_number(value: str) -> int | float | None:
    number = _NUMBERS.get(value, _NUMBERS)
    if number is not _NUMBERS:
        return number  # type: ignore[return-value]
    if _INTEGER.fullmatch(value) is not None:
        number = int(value)
    elif _DECIMAL.fullmatch(value) is not None:
        number = float(value)
    else:
        number = None
    if len(_NUMBERS) >= _NUMBERS_MAX:
        _NUMBERS.clear()
    _NUMBERS[value] = number
    return number


def _as_number(value: Value) -> int | float | None:
    if isinstance(value, str):
        return _string_number(value)
    if isinstance(value, bool) or value is None:
        return None
    return value  # type: ignore[no-any-return]


def _as_boolean(value: Value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
    return None


def _truth(node: _Node) -> _Node:
    """``node`` as a condition: a header used as one is its boolean reading."""
    if node.kind == _ANY:
        inner = node.evaluate
        return _Node(_BOOL, node.position, lambda m: _as_boolean(inner(m)))
    return node


# --- comparisons ----------------------------------------------------------------------------------

_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _compare_values(op: str, left: Value, right: Value) -> bool | None:
    """JMS comparison of two run-time values, a header's string read as the other side's type."""
    if left is None or right is None:
        return None
    compare = _ORDERINGS[op]
    left_bool, right_bool = isinstance(left, bool), isinstance(right, bool)
    if left_bool or right_bool:
        if op not in ("=", "<>"):
            return None
        a, b = _as_boolean(left), _as_boolean(right)
        if a is None or b is None or (isinstance(left, (int, float)) and not left_bool) or \
                (isinstance(right, (int, float)) and not right_bool):
            return None
        return compare(a, b)
    left_str, right_str = isinstance(left, str), isinstance(right, str)
    if left_str and right_str:
        return compare(left, right) if op in ("=", "<>") else None
    a_num, b_num = _as_number(left), _as_number(right)
    if a_num is None or b_num is None:
        return None
    return compare(a_num, b_num)


def _comparison(op: str, left: _Node, right: _Node, position: int, text: str) -> _Node:
    kinds = {left.kind, right.kind} - {_ANY}
    if _NULL in kinds:
        # ``x = NULL`` is always unknown in SQL; say so rather than match nothing in silence.
        raise SelectorError(text, position, "compare with NULL using IS NULL or IS NOT NULL")
    if len(kinds) == 2:
        raise SelectorError(text, position, f"cannot compare a {left.kind} with a {right.kind}")
    if kinds and op not in ("=", "<>") and kinds <= {_STR, _BOOL}:
        raise SelectorError(text, position, f"{op} does not apply to a {kinds.pop()}; only = and <> do")
    compare = _ORDERINGS[op]
    le, re_ = left.evaluate, right.evaluate
    # The common shape, a header against a literal, gets a closure of its own that reads the header
    # in place: one lookup, one test (a call less per clause: a fifth of a clause's cost).
    if right.constant is not None and left.header is not None:
        literal, name = right.constant[0], left.header
        if isinstance(literal, str):
            if op == "=":
                return _header_test(_Node(_BOOL, position, lambda m: None if (v := m.headers.get(name)) is None
                                          else v == literal), name, frozenset((literal,)))
            return _Node(_BOOL, position, lambda m: None if (v := m.headers.get(name)) is None else compare(v, literal))
        if not isinstance(literal, bool):
            def header_vs_number(m: Any) -> bool | None:
                v = m.headers.get(name)
                if v is None or (v := _string_number(v)) is None:
                    return None
                return compare(v, literal)
            return _Node(_BOOL, position, header_vs_number)
    if left.kind == right.kind == _NUM:
        def numbers(m: Any) -> bool | None:
            a, b = le(m), re_(m)
            return None if a is None or b is None else compare(a, b)
        return _Node(_BOOL, position, numbers)
    return _Node(_BOOL, position, lambda m: _compare_values(op, le(m), re_(m)))


# --- arithmetic -----------------------------------------------------------------------------------

def _divide(a: int | float, b: int | float) -> int | float | None:
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        quotient = abs(a) // abs(b)  # Java's long division truncates toward zero
        return quotient if (a >= 0) == (b >= 0) else -quotient
    return a / b


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "-": operator.sub, "*": operator.mul,
                                                     "/": _divide}


def _numeric(node: _Node, text: str) -> Eval:
    if node.kind not in (_NUM, _ANY):
        raise SelectorError(text, node.position, f"arithmetic needs numbers, not a {node.kind}")
    if node.kind == _NUM:
        return node.evaluate
    inner = node.evaluate
    return lambda m: _as_number(inner(m))


def _arithmetic(op: str, left: _Node, right: _Node, position: int, text: str) -> _Node:
    le, re_ = _numeric(left, text), _numeric(right, text)
    apply = _ARITHMETIC[op]

    def evaluate(m: Any) -> Value:
        a, b = le(m), re_(m)
        return None if a is None or b is None else apply(a, b)
    return _Node(_NUM, position, evaluate)


def _negate(node: _Node, position: int, text: str) -> _Node:
    inner = _numeric(node, text)
    if node.constant is not None:
        value = -node.constant[0]
        return _Node(_NUM, position, lambda _m: value, value, True)
    return _Node(_NUM, position, lambda m: None if (v := inner(m)) is None else -v)


# --- logic ----------------------------------------------------------------------------------------

def _condition(node: _Node, text: str) -> Eval:
    if node.kind not in (_BOOL, _ANY):
        raise SelectorError(text, node.position, f"expected a condition, found a {node.kind}")
    return _truth(node).evaluate


def _junction(dominant: bool, left: _Node, right: _Node, position: int, text: str) -> _Node:
    """AND (``dominant`` False) or OR (True) in three-valued logic: the dominant value on either
    side decides, and the right side is not evaluated when the left one did; otherwise unknown
    if either side is."""
    le, re_ = _condition(left, text), _condition(right, text)

    def evaluate(m: Any) -> bool | None:
        a: bool | None = le(m)
        if a is dominant:
            return dominant
        b: bool | None = re_(m)
        if b is dominant:
            return dominant
        return None if a is None or b is None else not dominant
    node = _Node(_BOOL, position, evaluate)
    node.prefilter = _prefilter_of(dominant, [left, right])
    return node


def _junctions(dominant: bool, nodes: list[_Node], positions: list[int], text: str) -> _Node:
    """``_junction`` of a chain (``a AND b AND c``) in one closure: each side in order until one
    is the dominant value, as the nested pairs would, at one call for the chain."""
    if len(nodes) <= 2:
        return nodes[0] if len(nodes) == 1 else _junction(dominant, nodes[0], nodes[1], positions[0], text)
    sides = tuple(_condition(node, text) for node in nodes)

    def evaluate(m: Any) -> bool | None:
        unknown = False
        for side in sides:
            v: bool | None = side(m)
            if v is dominant:
                return dominant
            if v is None:
                unknown = True
        return None if unknown else not dominant
    node = _Node(_BOOL, positions[0], evaluate)
    node.prefilter = _prefilter_of(dominant, nodes)
    return node


def _not(node: _Node, position: int, text: str) -> _Node:
    inner = _condition(node, text)
    return _Node(_BOOL, position, lambda m: None if (v := inner(m)) is None else not v)


def _like_pattern(pattern: str, escape: str | None) -> re.Pattern[str]:
    parts: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            parts.append(re.escape(next(chars, "")))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


# --- the parser -----------------------------------------------------------------------------------

class _Parser:
    """Recursive descent over the JMS grammar, lowest precedence first: OR, AND, NOT, predicates
    (comparison, BETWEEN, LIKE, IN, IS NULL), + and -, * and /, unary sign, primaries."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0
        self.depth = 0

    def parse(self) -> _Node:
        node = self.disjunction()
        token = self.peek()
        if token.kind != "end":
            raise self.error(token, f"unexpected {token.text!r}")
        return node

    # token helpers
    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def accept(self, kind: str) -> _Token | None:
        if self.peek().kind == kind:
            return self.take()
        return None

    def expect(self, kind: str, what: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            found = "the end of the selector" if token.kind == "end" else repr(token.text)
            raise self.error(token, f"expected {what}, found {found}")
        return self.take()

    def error(self, token: _Token, problem: str) -> SelectorError:
        return SelectorError(self.text, token.position, problem)

    def nest(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(token, f"nested deeper than {MAX_DEPTH}")

    # grammar
    def disjunction(self) -> _Node:
        nodes, positions = [self.conjunction()], []
        while (token := self.accept("OR")) is not None:
            nodes.append(self.conjunction())
            positions.append(token.position)
        return _junctions(True, nodes, positions, self.text)

    def conjunction(self) -> _Node:
        nodes, positions = [self.negation()], []
        while (token := self.accept("AND")) is not None:
            nodes.append(self.negation())
            positions.append(token.position)
        return _junctions(False, nodes, positions, self.text)

    def negation(self) -> _Node:
        token = self.accept("NOT")
        if token is None:
            return self.predicate()
        self.nest(token)
        node = _not(self.negation(), token.position, self.text)
        self.depth -= 1
        return node

    def predicate(self) -> _Node:
        left = self.sum()
        token = self.peek()
        if token.kind in _ORDERINGS:
            self.take()
            return _comparison(token.kind, left, self.sum(), token.position, self.text)
        if token.kind == "IS":
            self.take()
            negated = self.accept("NOT") is not None
            self.expect("NULL", "NULL after IS")
            inner = left.evaluate
            if negated:
                present = _Node(_BOOL, token.position, lambda m: inner(m) is not None)
                return present if left.header is None else _header_test(present, left.header, None)
            return _Node(_BOOL, token.position, lambda m: inner(m) is None)
        negated = False
        if token.kind == "NOT" and self.peek(1).kind in ("BETWEEN", "LIKE", "IN"):
            self.take()
            negated = True
            token = self.peek()
        if token.kind == "BETWEEN":
            node = self.between(left)
        elif token.kind == "LIKE":
            node = self.like(left)
        elif token.kind == "IN":
            node = self.within(left)
        else:
            return left
        return _not(node, token.position, self.text) if negated else node

    def between(self, left: _Node) -> _Node:
        token = self.take()
        low = self.sum()
        self.expect("AND", "AND in BETWEEN … AND …")
        high = self.sum()
        return _junction(False, _comparison(">=", left, low, token.position, self.text),
                    _comparison("<=", left, high, token.position, self.text), token.position, self.text)

    def like(self, left: _Node) -> _Node:
        token = self.take()
        if left.kind not in (_STR, _ANY):
            raise self.error(token, f"LIKE applies to strings, not a {left.kind}")
        pattern = self.expect("literal", "a string pattern after LIKE")
        if not isinstance(pattern.value, str):
            raise self.error(pattern, "the LIKE pattern must be a string")
        escape: str | None = None
        if self.accept("ESCAPE") is not None:
            escape_token = self.expect("literal", "a one-character string after ESCAPE")
            if not isinstance(escape_token.value, str) or len(escape_token.value) != 1:
                raise self.error(escape_token, "ESCAPE takes a string of one character")
            escape = escape_token.value
        fullmatch = _like_pattern(pattern.value, escape).fullmatch
        inner = left.evaluate

        def evaluate(m: Any) -> bool | None:
            value = inner(m)
            return fullmatch(value) is not None if isinstance(value, str) else None
        return _Node(_BOOL, token.position, evaluate)

    def within(self, left: _Node) -> _Node:
        token = self.take()
        self.expect("(", "( after IN")
        values: list[Value] = []
        while True:
            item = self.peek()
            sign = 1
            if item.kind == "-" and self.peek(1).kind == "literal":
                self.take()
                sign = -1
                item = self.peek()
            literal = self.expect("literal", "a literal in the IN list")
            if literal.value is None:
                raise self.error(literal, "NULL cannot be in an IN list")
            if sign == -1:
                if isinstance(literal.value, (bool, str)):
                    raise self.error(item, "a minus sign before a non-number")
                values.append(-literal.value)
            else:
                values.append(literal.value)
            if self.accept(")") is not None:
                break
            self.expect(",", ", or ) in the IN list")
        if len({_literal(v, 0).kind for v in values}) > 1:
            raise self.error(token, "the values of an IN list must be of one type")
        for value in values:  # the static type check of each "left = value"
            _comparison("=", left, _literal(value, token.position), token.position, self.text)
        inner = left.evaluate
        if all(isinstance(v, str) for v in values):
            members = frozenset(values)
            if left.header is not None:
                name = left.header
                return _header_test(_Node(_BOOL, token.position,
                                          lambda m: None if (v := m.headers.get(name)) is None else v in members),
                                    name, members)
            return _Node(_BOOL, token.position, lambda m: None if (v := inner(m)) is None else v in members)

        def evaluate(m: Any) -> bool | None:
            value = inner(m)
            if value is None:
                return None
            answers = [_compare_values("=", value, v) for v in values]
            if True in answers:
                return True
            return None if None in answers else False
        return _Node(_BOOL, token.position, evaluate)

    def sum(self) -> _Node:
        node = self.product()
        while self.peek().kind in ("+", "-"):
            token = self.take()
            node = _arithmetic(token.kind, node, self.product(), token.position, self.text)
        return node

    def product(self) -> _Node:
        node = self.unary()
        while self.peek().kind in ("*", "/"):
            token = self.take()
            node = _arithmetic(token.kind, node, self.unary(), token.position, self.text)
        return node

    def unary(self) -> _Node:
        token = self.peek()
        if token.kind in ("+", "-"):
            self.take()
            self.nest(token)
            operand = self.unary()
            self.depth -= 1
            if token.kind == "+":
                return _Node(_NUM, token.position, _numeric(operand, self.text), *(
                    (operand.constant[0], True) if operand.constant is not None else ()))
            return _negate(operand, token.position, self.text)
        return self.primary()

    def primary(self) -> _Node:
        token = self.peek()
        if token.kind == "literal":
            self.take()
            return _literal(token.value, token.position)
        if token.kind == "NULL":
            self.take()
            return _literal(None, token.position)
        if token.kind == "name":
            self.take()
            return _identifier(token.value, token.position)
        if token.kind == "(":
            self.take()
            self.nest(token)
            node = self.disjunction()
            self.depth -= 1
            self.expect(")", "a closing )")
            return node
        found = "the end of the selector" if token.kind == "end" else repr(token.text)
        raise self.error(token, f"expected a value, found {found}")
