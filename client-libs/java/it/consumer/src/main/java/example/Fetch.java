package example;

import java.io.InputStream;
import java.net.URI;
import java.nio.file.Path;
import javax.net.ssl.HttpsURLConnection;
import org.converge.Converge;
import org.converge.ConvergeTrustManager;

/** Fetch https://HOST:PORT/ trusting what the notaries of CONFIG_DIR confirm. */
public final class Fetch {
    public static void main(String[] args) throws Exception {
        var client = Converge.client(Path.of(args[0]));
        var conn = (HttpsURLConnection) URI.create("https://" + args[1] + ":" + args[2] + "/").toURL().openConnection();
        conn.setSSLSocketFactory(ConvergeTrustManager.sslContext(client).getSocketFactory());
        conn.setHostnameVerifier((host, session) -> true); // the notaries replace the name check
        try (InputStream in = conn.getInputStream()) {
            System.out.write(in.readAllBytes());
            System.out.flush();
        }
    }
}
