# frozen_string_literal: true

require "fileutils"
require "sqlite3"

module Converge
  # The local cache, in the schema of the 2011 add-on so that one file serves every client:
  # fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)
  # with a unique index on (location, fingerprint). WAL and a busy timeout let several
  # processes share it.
  class LocalCache
    attr_reader :path, :read_only

    # Opens (and, unless read_only, creates) a cache file.
    def initialize(path, read_only: false)
      @path = path
      @read_only = read_only
      FileUtils.mkdir_p(File.dirname(path)) unless read_only
      @db = SQLite3::Database.new(path, readonly: read_only)
      @db.busy_timeout = 5000
      unless read_only
        @db.execute("PRAGMA journal_mode = WAL")
        @db.execute("PRAGMA synchronous = NORMAL")
        @db.execute("CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)")
        @db.execute("CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint)")
      end
      @lookup = @db.prepare("SELECT timestamp, typeof(timestamp) FROM fingerprints WHERE location = ? AND fingerprint = ?")
    rescue SQLite3::Exception, SystemCallError => e
      raise CacheIOError, "cannot open cache #{path}: #{e.message}"
    end

    # The entry's timestamp, or nil when there is none (or it is not an integer).
    def lookup(location, fingerprint)
      row = @lookup.execute(location, fingerprint).first
      row && row[1] == "integer" ? row[0] : nil
    rescue SQLite3::Exception => e
      raise CacheIOError, "cache lookup failed: #{e.message}"
    end

    # Records a trusted fingerprint at timestamp (unix seconds).
    def store(location, fingerprint, timestamp)
      raise CacheIOError, "cache opened read-only" if read_only

      @db.execute("INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?) " \
                  "ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp",
                  [location, fingerprint, timestamp.to_i])
    rescue SQLite3::Exception => e
      raise CacheIOError, "cache write failed: #{e.message}"
    end

    def close
      @lookup&.close
      @db&.close
    rescue SQLite3::Exception
      nil
    end
  end
end
