package org.converge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** Every case of every shared vector file, compared as the conformance runner compares. */
class VectorsTest {
    static Path vectorsDir() {
        String p = System.getProperty("converge.vectors", "../vectors");
        return Paths.get(p);
    }

    static List<Path> files() throws Exception {
        try (Stream<Path> s = Files.list(vectorsDir())) {
            // canonical-json.json tests the notary's encoder: clients have none and must not run it
            return s.filter(p -> p.toString().endsWith(".json"))
                    .filter(p -> !p.getFileName().toString().equals("canonical-json.json"))
                    .sorted()
                    .toList();
        }
    }

    static Map<?, ?> load(Path p) throws Exception {
        return (Map<?, ?>) Json.parse(Files.readAllBytes(p));
    }

    @TestFactory
    Stream<DynamicNode> everyVectorFile() throws Exception {
        List<DynamicNode> nodes = new ArrayList<>();
        for (Path f : files()) {
            Map<?, ?> doc = load(f);
            if (!Vectors.SCHEMAS.contains(doc.get("schema"))) {
                // every shared vector file's schema is implemented: a new one fails until it is
                nodes.add(DynamicTest.dynamicTest(f.getFileName().toString(), () -> fail(
                        "schema " + doc.get("schema") + " is not implemented by this client")));
                continue;
            }
            List<DynamicNode> cases = new ArrayList<>();
            for (Object o : (List<?>) doc.get("tests")) {
                Map<?, ?> c = (Map<?, ?>) o;
                cases.add(DynamicTest.dynamicTest("#" + c.get("id") + " " + c.get("comment"), () -> {
                    Map<String, Object> out = Vectors.runCase(doc, c);
                    assertEquals(List.of(), Vectors.compare(c, out));
                }));
            }
            nodes.add(DynamicContainer.dynamicContainer(f.getFileName().toString(), cases));
        }
        return nodes.stream();
    }

    @Test
    void everyImplementedSchemaHasAFileAndEveryFileHasCases() throws Exception {
        java.util.Set<Object> schemas = new java.util.HashSet<>();
        for (Path f : files()) {
            Map<?, ?> doc = load(f);
            schemas.add(doc.get("schema"));
            assertFalse(((List<?>) doc.get("tests")).isEmpty(), f.toString());
        }
        assertTrue(schemas.containsAll(Vectors.SCHEMAS), "a file for every schema this client implements");
    }

    @Test
    void compareReportsAWrongOutput() throws Exception {
        // the must-fail twin of everyVectorFile: a changed output is a difference
        Map<?, ?> doc = load(vectorsDir().resolve("fingerprints.json"));
        Map<?, ?> c = (Map<?, ?>) ((List<?>) doc.get("tests")).get(0);
        Map<String, Object> out = new LinkedHashMap<>(Vectors.runCase(doc, c));
        assertEquals(List.of(), Vectors.compare(c, out));
        out.put("canonical", "00");
        assertEquals(1, Vectors.compare(c, out).size());
        out.put("result", "invalid");
        assertEquals(2, Vectors.compare(c, out).size());
    }
}
