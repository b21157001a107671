/// A closure to keep inside a lock's value (`Mutex<(hook: Hook<Void>?, …)>`)
/// or any other generic container whose value is reached `inout`.
///
/// Never keep a bare closure (or an optional one, or one in a tuple) there.
/// Swift stores a function value inside a generic type in its most general
/// form. Every `withLock` hands the body the value in its concrete form and
/// stores it back afterwards, and each of those conversions wraps the
/// closure in one more thunk. The kept closure grows a chain, a few
/// allocations long per `withLock`. Calling it then runs through every
/// link. A daemon that used such a hook leaked memory on every use and
/// would in the end have overflowed its stack (100,000 uses: 12 MB; a
/// million: a crash). A class reference needs no conversion, so the box
/// stays one object however often the lock is taken.
public final class Hook<Argument>: Sendable {
    private let body: @Sendable (Argument) -> Void

    public init(_ body: @escaping @Sendable (Argument) -> Void) { self.body = body }

    public func callAsFunction(_ argument: Argument) { body(argument) }
}

extension Hook where Argument == Void {
    public func callAsFunction() { body(()) }
}
