package org.converge;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

/**
 * The local fingerprint cache on SQLite with the 2011 add-on's schema: {@code
 * fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)}
 * and a unique index on (location, fingerprint). {@code location} is {@code host:port}, {@code
 * fingerprint} the canonical colon-hex form, {@code timestamp} unix seconds. WAL journal, a
 * busy timeout; the connection stays open. Thread-safe (synchronised).
 */
public final class LocalCache implements AutoCloseable {
    public static final int BUSY_TIMEOUT_MS = 5000;
    static final String[] SCHEMA = {
        "CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, "
                + "fingerprint TEXT, timestamp INTEGER)",
        "CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints "
                + "(location, fingerprint)",
    };

    private final Path path;
    private final boolean readonly;
    private final Connection db;
    private final PreparedStatement lookup;

    public LocalCache(Path path, boolean readonly) throws ConvergeException.IoFailure {
        this.path = path;
        this.readonly = readonly;
        try {
            Properties p = new Properties();
            p.setProperty("busy_timeout", Integer.toString(BUSY_TIMEOUT_MS));
            if (readonly) {
                p.setProperty("open_mode", "1"); // SQLITE_OPEN_READONLY
            } else {
                Path parent = path.toAbsolutePath().getParent();
                if (parent != null) {
                    Files.createDirectories(parent);
                }
            }
            db = DriverManager.getConnection("jdbc:sqlite:" + path, p);
            if (!readonly) {
                try (Statement s = db.createStatement()) {
                    s.execute("PRAGMA journal_mode = WAL");
                    s.execute("PRAGMA synchronous = NORMAL");
                    for (String stmt : SCHEMA) {
                        s.execute(stmt);
                    }
                }
            }
            lookup = db.prepareStatement(
                    "SELECT timestamp FROM fingerprints WHERE location = ? AND fingerprint = ?");
        } catch (SQLException | IOException e) {
            throw new ConvergeException.IoFailure("cache-io", "cannot open cache " + path + ": " + e.getMessage(), e);
        }
    }

    public Path path() {
        return path;
    }

    /** The entry's timestamp, or null when there is none. */
    public synchronized Long lookup(String location, String fingerprint) throws ConvergeException.IoFailure {
        try {
            lookup.setString(1, location);
            lookup.setString(2, fingerprint);
            try (ResultSet rs = lookup.executeQuery()) {
                if (!rs.next()) {
                    return null;
                }
                Object v = rs.getObject(1);
                if (v instanceof Integer i) {
                    return i.longValue();
                }
                if (v instanceof Long l) {
                    return l;
                }
                return null;
            }
        } catch (SQLException e) {
            throw new ConvergeException.IoFailure("cache-io", "cache lookup failed: " + e.getMessage(), e);
        }
    }

    public synchronized void store(String location, String fingerprint, long timestamp)
            throws ConvergeException.IoFailure {
        if (readonly) {
            throw new ConvergeException.IoFailure("cache-io", "cache opened read-only");
        }
        try (PreparedStatement s = db.prepareStatement(
                "INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?) "
                        + "ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp")) {
            s.setString(1, location);
            s.setString(2, fingerprint);
            s.setLong(3, timestamp);
            s.executeUpdate();
        } catch (SQLException e) {
            throw new ConvergeException.IoFailure("cache-io", "cache write failed: " + e.getMessage(), e);
        }
    }

    @Override
    public synchronized void close() {
        try {
            lookup.close();
            db.close();
        } catch (SQLException e) {
            // closing a connection that failed already: nothing left to release
        }
    }
}
