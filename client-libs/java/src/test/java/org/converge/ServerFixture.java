package org.converge;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.Function;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;

/** The test identities, loopback servers closed after each test, and a client configuration. */
abstract class ServerFixture {
    static TestServers.Identity notaryId;
    static TestServers.Identity otherId;
    static String genuine; // the target's certificate (the "other" identity)
    static final String FORGED = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33";

    final List<TestServers.Server> servers = new ArrayList<>();
    @TempDir Path dir;

    @BeforeAll
    static void identities() throws Exception {
        notaryId = new TestServers.Identity("notary");
        otherId = new TestServers.Identity("other");
        genuine = otherId.sha1();
    }

    @AfterEach
    void stop() throws Exception {
        for (TestServers.Server s : servers) {
            s.close();
        }
    }

    TestServers.Server serve(TestServers.Identity id, Function<TestServers.Request, byte[]> h) throws Exception {
        TestServers.Server s = new TestServers.Server(id, h);
        servers.add(s);
        return s;
    }

    Config config(List<Bundle> bundles) {
        Config c = new Config();
        c.directory = dir;
        c.db = dir.resolve("cache.sqlite3");
        c.notariesDir = null;
        c.bundles = bundles;
        c.connectTimeout = 5;
        c.notaryTimeout = 5;
        c.totalTimeout = 10;
        return c;
    }

    Client client(Config c) {
        return new Client(c, new Random(7), () -> System.currentTimeMillis() / 1000.0);
    }
}
