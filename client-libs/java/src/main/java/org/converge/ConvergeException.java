package org.converge;

/**
 * Base of the two error families: {@link BadInput} (the data breaks a rule; retrying does not
 * help) and {@link IoFailure} (an IO step failed; retrying later may help). {@link #kind()} is
 * the stable word the shared vectors use: {@code fingerprint}, {@code target}, {@code
 * response}, {@code signature}, {@code bundle}, {@code config}, {@code unreachable}, {@code
 * pin}, {@code cache-io}.
 */
public abstract class ConvergeException extends Exception {
    private static final long serialVersionUID = 1L;
    private final String kind;

    protected ConvergeException(String kind, String message, Throwable cause) {
        super(message, cause);
        this.kind = kind;
    }

    public String kind() {
        return kind;
    }

    /** Data that breaks a rule. */
    public static final class BadInput extends ConvergeException {
        private static final long serialVersionUID = 1L;

        public BadInput(String kind, String message) {
            super(kind, message, null);
        }

        public BadInput(String kind, String message, Throwable cause) {
            super(kind, message, cause);
        }
    }

    /** An IO step failed. */
    public static final class IoFailure extends ConvergeException {
        private static final long serialVersionUID = 1L;

        public IoFailure(String kind, String message) {
            super(kind, message, null);
        }

        public IoFailure(String kind, String message, Throwable cause) {
            super(kind, message, cause);
        }
    }

    static BadInput bad(String kind, String message) {
        return new BadInput(kind, message);
    }
}
